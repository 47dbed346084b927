"""Running the measurements: plans of units, executors (local, Ray), the driver, the cache and its keys, progress and the experiments' registry."""
