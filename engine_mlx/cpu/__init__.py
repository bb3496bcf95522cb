"""The CPU's share of speed on Linux, before MLX is imported: which BLAS does MLX's matrix
products (``libraries``, measured by ``choice`` through ``probe``), and the small-batch product
that takes the few-row products of decoding and verification from it (``small_gemm``).
``engine_mlx.blas`` puts them together. Stdlib only."""
