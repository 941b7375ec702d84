"""Tesseract behind one small interface: pages in, a ``Document`` of words with boxes out.

``tesseract`` is the engine, ``tesslib`` the in-process library it prefers over the CLI, and
``orientation`` turns sideways and upside-down pages upright before they are read.
"""
