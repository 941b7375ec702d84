"""The extraction pipeline: what a client asks for (``request``), the one path from a saved
upload to a reply (``reply``), the engines' gate and the ``Extractor`` (``extraction``).

Empty on purpose: the command line reads the request model before anything heavy loads
(``extractor serve`` must prepare the metrics directory before prometheus-client is imported),
so importing ``extractor.pipeline.request`` must not import the engines.
"""
