"""Which MLX device is live, which dtype the engine computes in, and how that is described.

On the CPU the engine computes in fp32 when memory allows: fp16/bf16 matmuls never go through
BLAS there and are several times slower (the BLAS and the small-batch product are loaded by
``blas``, before MLX).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import mlx.core as mx

from engine_mlx import compute_path
from engine_mlx.blas import status as blas_status
from engine_mlx.cpu import quantized_product


@dataclass(frozen=True)
class BackendInfo:
    """What the engine runs on; shown by the CLI, the bench and the app."""

    device: str  # "metal", "cuda" or "cpu"
    compute_dtype: str  # "float32", "float16" or "bfloat16"
    blas: str  # engine_mlx.blas's description: the BLAS, why, and the small-batch product
    blas_summary: str  # the same in a few words
    kernels: str  # which path the custom kernels take: ``kernel_description``
    quantized: str = ""  # how MLX-quantized layers are multiplied (the CPU's own product)
    path: str = "CPU path"  # compute_path.describe(): the CPU's own code, or a GPU's

    def describe(self) -> str:
        cpu = f", {self.blas}; quantized layers: {self.quantized}" if self.device == "cpu" else ""
        return (
            f"MLX {mx.__version__} on {self.device} ({self.path}), compute "
            f"{self.compute_dtype}{cpu}; {self.kernels}"
        )

    def summary(self) -> str:
        """A status bar's worth: "MLX 0.32.4 · CPU · float32 · OpenBLAS 0.3.21 ×2 + …"."""
        parts = [f"MLX {mx.__version__}", self.device.upper(), self.compute_dtype]
        if compute_path.emulated_gpu():
            parts.append(self.path)
        if self.device == "cpu":
            parts.append(self.blas_summary)
        if kernel_path() != "reference":
            parts.append(self.kernels.split(":")[0])
        return " · ".join(parts)


KERNEL_SWITCH = "FLASHCHAT_KERNELS"
KERNEL_OPS = (
    "tree attention",
    "acceptance",
    "candidate top-k",
    "path scores",
    "KV compaction",
    "local convolution",
)
"""The kernels a generation runs (``engine_mlx/kernels``), for ``info`` and the status bar."""


def kernels_enabled() -> bool:
    """False when ``FLASHCHAT_KERNELS=0`` (or ``reference``): every op runs its MLX reference."""
    value = os.environ.get(KERNEL_SWITCH, "1").strip().lower()
    return value not in ("0", "false", "off", "no", "reference")


def kernel_path() -> str:
    """Which implementation the kernel ops run: "metal" or "cuda" (the kernels on the live
    GPU backend), "emulated" (``FLASHCHAT_KERNELS=emulate``: the same kernels in the CPU
    emulator, slow, for tiny models and tests; also the GPU path on the CPU, unless the kernels
    are switched off) or "reference" (MLX ops: the CPU's path, or forced with
    ``FLASHCHAT_KERNELS=0``)."""
    if os.environ.get(KERNEL_SWITCH, "").strip().lower() == "emulate":
        return "emulated"
    if compute_path.emulated_gpu() and kernels_enabled():
        return "emulated"
    device = live_device()
    return device if device in ("metal", "cuda") and kernels_enabled() else "reference"


def kernel_description() -> str:
    path = kernel_path()
    ops = ", ".join(KERNEL_OPS)
    if path == "emulated":
        return f"kernels in the CPU emulator: {ops}"
    if path in ("metal", "cuda"):
        from engine_mlx.kernels.self_check import switched_off

        off = "".join(f"; {op} switched off: {why}" for op, why in switched_off().items())
        return f"{'Metal' if path == 'metal' else 'CUDA'} kernels: {ops}{off}"
    where = "CPU" if live_device() == "cpu" else "kernels switched off"
    return f"reference ops ({where})"


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
    path, so the checkpoint's dtype is kept; so it is on the GPU path taken on the CPU
    (``compute_path``). ``FLASHCHAT_DTYPE`` (e.g. ``float16``) overrides, for measurements.
    """
    override = os.environ.get("FLASHCHAT_DTYPE")
    if override:
        return getattr(mx, override)
    if not compute_path.cpu_path():
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
        kernels=kernel_description(),
        quantized=quantized_product.describe() if compute_path.cpu_path() else "MLX's own",
        path=compute_path.describe(),
    )
