"""Analysis, read-only: per-node cost, the operator DAG, critical path and parallelism, kernel
profiles, and the clustering that lanes and streams both use."""
