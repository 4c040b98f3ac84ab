"""CAPTURE's profiling (III-A): mCAP's plan at several batch sizes and over merged layers
(``batches.py``), and the dp/tp variants of ``profile --parallel`` (``parallel.py``)."""
