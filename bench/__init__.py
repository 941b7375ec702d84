"""The benchmark of the extractor: ``python -m bench.run`` (``make bench``) writes results.md."""
