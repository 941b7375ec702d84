"""The benchmark of the extractor: ``python -m bench.run`` (``make bench``) writes results.md."""

import os

# The bare engines timed in this process get the server's numpy threading
# (extractor/cli.py): OpenBLAS on one thread. With a thread per core, bare faster-whisper's
# feature extraction leaves a second thread spinning, 0.12 s of CPU per 6 s clip for no speed-up
# on two cores (bench/stages.py says more). Read when numpy is first imported,
# which no module of this package does before this line.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
