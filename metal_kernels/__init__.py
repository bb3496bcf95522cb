"""Kernel sources in the portable dialect, their preludes, and the CPU emulator (tests).

``sources`` reads the .metal files; ``emulator`` runs a kernel body on the CPU. Dispatch to
MLX's Metal / CUDA kernels lives in ``engine_mlx.kernels``; this package never imports MLX.
"""
