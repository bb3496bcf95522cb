"""Custom kernels: one op, three ways to run it.

Each op module (``tree_attention``, ``acceptance``, ``candidates``, ``local_conv``,
``kv_compact``) has ``reference`` (MLX ops: the semantics, and what runs on the CPU), ``kernel``
(the same result through the kernels of ``metal_kernels/*.metal`` on a given executor) and
``run``, which takes the Metal kernel when MLX's Metal backend is live, the CUDA kernel when
MLX's CUDA backend is live, and the reference otherwise. ``FLASHCHAT_KERNELS=0`` turns the
kernels off (references everywhere), for comparison.
"""

from engine_mlx.backend import kernels_enabled
from engine_mlx.kernels.launch import (
    ENV_SWITCH,
    EmulatorExecutor,
    Executor,
    GpuExecutor,
    Launch,
    live_backend,
    live_executor,
)

__all__ = [
    "ENV_SWITCH",
    "EmulatorExecutor",
    "Executor",
    "GpuExecutor",
    "Launch",
    "kernels_enabled",
    "live_backend",
    "live_executor",
]
