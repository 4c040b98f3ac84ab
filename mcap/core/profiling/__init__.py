"""mCAP's profiling, the pure half (section 3.1): which partitionings to run
(``schedule.py``: the profiling plan, ``placing.py`` its windows in runs, ``replanning.py``
the runs still missing after failures, and ``safefill.py`` around windows over the capacity),
the per-layer statistics read from them (``stats.py``), and stage reuse for sweeps
(``cover.py``: measure each distinct stage once, compose the rest)."""
