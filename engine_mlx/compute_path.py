"""Which of the engine's two paths runs: the CPU's or a GPU's.

The CPU path is what makes Linux fast: float32 compute, the engine's C products and decoder
layers, numpy attention, the C sampler. A Mac never takes it: on Metal the engine computes in
the checkpoint's dtype through MLX's own kernels and the portable kernels. ``FLASHCHAT_PATH=gpu``
makes the engine on the CPU device take every decision a GPU takes except the device itself,
so that the code a Mac runs is the code the tests run. Kept free of every other engine module:
the model, sampler and kernel modules all ask it.
"""

from __future__ import annotations

import os

import mlx.core as mx

PATH_SWITCH = "FLASHCHAT_PATH"
PATHS = ("cpu", "gpu")


def requested() -> str | None:
    """The path ``FLASHCHAT_PATH`` asks for, or None (the device's own). Raises ValueError,
    naming the values it takes, for anything else."""
    value = os.environ.get(PATH_SWITCH, "").strip().lower()
    if value in ("", "auto"):
        return None
    if value not in PATHS:
        raise ValueError(f"{PATH_SWITCH}={value!r}: use gpu, cpu or auto (the device's own)")
    return value


def engine_path() -> str:
    """ "gpu" on a GPU device or when asked for; "cpu" on the CPU device otherwise. Asking for
    "cpu" on a GPU device changes nothing: the CPU path's C code cannot run on a GPU's arrays."""
    if mx.default_device() != mx.cpu:
        return "gpu"
    return "gpu" if requested() == "gpu" else "cpu"


def cpu_path() -> bool:
    """True where the CPU's own code runs (C products, numpy layers, the C sampler)."""
    return engine_path() == "cpu"


def emulated_gpu() -> bool:
    """The GPU path taken on the CPU device: the kernels run in the CPU emulator."""
    return mx.default_device() == mx.cpu and requested() == "gpu"


def describe() -> str:
    """For ``info`` and the status bar: "CPU path", "GPU path" or "GPU path on the CPU"."""
    if emulated_gpu():
        return "GPU path on the CPU"
    return f"{engine_path().upper()} path"
