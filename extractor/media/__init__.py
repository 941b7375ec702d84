"""What an uploaded file is, decided from its bytes, and decoding it into pages or samples.

The file name and the part's Content-Type are never trusted: the magic numbers pick the kind
(``sniff``), and the decoder (Pillow in ``images``, PDFium in a renderer process of its own in
``pdf``/``pdfrender``, FFmpeg through PyAV in ``audio``) has the last word. Every decoder error
is translated into ``UnsupportedMedia`` (415) or a ``PayloadTooLarge`` (413). Per-request folders
are in ``workdirs``, audio spooled in pieces in ``spooled``.

This package imports nothing itself: the PDF renderer process (``python -m
extractor.media.pdfrender``) starts for every PDF and must not load numpy, Pillow or PyAV.
"""
