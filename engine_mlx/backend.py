"""Which MLX device is live, and how to make the CPU backend fast.

On Linux the CPU wheel of MLX ships a slow reference BLAS. Loading OpenBLAS into the process
with ``RTLD_GLOBAL`` *before* ``import mlx.core`` makes MLX's fp32 matmuls resolve to it
(loading it afterwards has no effect). Measured on a 2-core x86 CPU (MLX 0.32.4): a
[256x576]@[576x1536] fp32 matmul takes 130 ms with the bundled BLAS and 4.5 ms with OpenBLAS;
the matching gemv 0.72 ms vs 0.26 ms. fp16/bf16 matmuls never go through BLAS on the CPU and
are several times slower than fp32, so on the CPU the engine computes in fp32 when memory
allows (SmolLM2-135M, 128 greedy tokens: see the README's bench table).

Set ``FLASHCHAT_NO_OPENBLAS=1`` to keep the bundled BLAS (for side-by-side measurements).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from dataclasses import dataclass

_OPENBLAS_NAMES = ("libopenblas.so.0", "libopenblas.so", "libopenblasp-r0.3.21.so")
_openblas_status: str = "not attempted"


def preload_openblas() -> str:
    """Load OpenBLAS globally if we are on Linux, before MLX is imported. Returns a status."""
    global _openblas_status
    if _openblas_status != "not attempted":
        return _openblas_status
    if not sys.platform.startswith("linux"):
        _openblas_status = "not needed on this platform"
    elif os.environ.get("FLASHCHAT_NO_OPENBLAS", "") not in ("", "0"):
        _openblas_status = "disabled by FLASHCHAT_NO_OPENBLAS"
    elif "mlx.core" in sys.modules:
        _openblas_status = "too late: mlx.core was imported before engine_mlx"
    else:
        _openblas_status = "not found (apt-get install libopenblas0-pthread)"
        found = ctypes.util.find_library("openblas")
        for name in ((found,) if found else ()) + _OPENBLAS_NAMES:
            try:
                ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
            except OSError:
                continue
            _openblas_status = f"loaded ({name})"
            break
    return _openblas_status


preload_openblas()

import mlx.core as mx  # noqa: E402  (must come after the OpenBLAS preload)


@dataclass(frozen=True)
class BackendInfo:
    """What the engine runs on; shown by the CLI, the bench and the app."""

    device: str  # "metal", "cuda" or "cpu"
    compute_dtype: str  # "float32", "float16" or "bfloat16"
    openblas: str
    custom_kernels: bool

    def describe(self) -> str:
        return (
            f"MLX {mx.__version__} on {self.device}, compute {self.compute_dtype}, "
            f"OpenBLAS {self.openblas}"
        )


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
        openblas=_openblas_status,
        custom_kernels=device in ("metal", "cuda"),
    )
