"""Pictures of runs (matplotlib is imported only inside this package)."""
