"""Long work that drives the runner and the store: profiling, sweeps, scaling."""
