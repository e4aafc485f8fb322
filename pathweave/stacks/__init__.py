"""BrainSlug: chains of element-wise and pooling layers collapsed into stacks and run depth first by
generated kernels (C on CPU, Triton on CUDA)."""
