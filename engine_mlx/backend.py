"""Which MLX device is live, which dtype the engine computes in, and how that is described.

On the CPU the engine computes in fp32 when memory allows: fp16/bf16 matmuls never go through
BLAS there and are several times slower (the BLAS and the small-batch product are loaded by
``blas``, before MLX).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import mlx.core as mx

from engine_mlx.blas import status as blas_status


@dataclass(frozen=True)
class BackendInfo:
    """What the engine runs on; shown by the CLI, the bench and the app."""

    device: str  # "metal", "cuda" or "cpu"
    compute_dtype: str  # "float32", "float16" or "bfloat16"
    blas: str  # engine_mlx.blas's description: the BLAS, why, and the small-batch product
    blas_summary: str  # the same in a few words
    custom_kernels: bool

    def describe(self) -> str:
        return f"MLX {mx.__version__} on {self.device}, compute {self.compute_dtype}" + (
            f", {self.blas}" if self.device == "cpu" else ""
        )

    def summary(self) -> str:
        """A status bar's worth: "MLX 0.32.4 · CPU · float32 · OpenBLAS 0.3.21 ×2 + …"."""
        parts = [f"MLX {mx.__version__}", self.device.upper(), self.compute_dtype]
        if self.device == "cpu":
            parts.append(self.blas_summary)
        return " · ".join(parts)


def live_device() -> str:
    """The backend MLX will run on by default."""
    if mx.default_device() == mx.cpu:
        return "cpu"
    if mx.metal.is_available():
        return "metal"
    return "cuda" if _cuda_available() else "gpu"


def _cuda_available() -> bool:
    cuda = getattr(mx, "cuda", None)
    return bool(cuda is not None and cuda.is_available())


def compute_dtype(weight_bytes_fp32: int | None = None) -> mx.Dtype | None:
    """The dtype to compute in, or ``None`` to keep the checkpoint's.

    On the CPU: fp32 (BLAS-backed, several times faster than half precision there) when the
    fp32 weights take under 60% of physical memory. On a GPU half precision is the fast
    path, so the checkpoint's dtype is kept. ``FLASHCHAT_DTYPE`` (e.g. ``float16``)
    overrides, for measurements.
    """
    override = os.environ.get("FLASHCHAT_DTYPE")
    if override:
        return getattr(mx, override)
    if live_device() != "cpu":
        return None
    if weight_bytes_fp32 is not None and weight_bytes_fp32 > 0.6 * _total_memory_bytes():
        return None
    return mx.float32


def _total_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def backend_info(dtype: mx.Dtype | None = None) -> BackendInfo:
    device = live_device()
    dt = dtype if dtype is not None else compute_dtype()
    dt_name = "checkpoint" if dt is None else str(dt).replace("mlx.core.", "")
    return BackendInfo(
        device=device,
        compute_dtype=dt_name,
        blas=blas_status().describe(),
        blas_summary=blas_status().summary(),
        custom_kernels=device in ("metal", "cuda"),
    )
