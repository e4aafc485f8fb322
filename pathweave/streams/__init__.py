"""Opara: nodes on several CUDA streams in a resource-aware launch order, captured into one CUDA Graph."""
