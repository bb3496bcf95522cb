"""The process's quantized product: built once, on the float32 product's threads, and how it
multiplies here (for ``info``, the bench and the status line). No MLX: ``backend`` asks it
without importing the model code."""

from __future__ import annotations

import functools
import os

from engine_mlx import blas
from engine_mlx.cpu.quant_gemm import QuantGemm
from engine_mlx.cpu.small_gemm import BuildError

ACTIVATIONS_SWITCH = "FLASHCHAT_QUANT_ACTIVATIONS"


@functools.cache
def product() -> QuantGemm | None:
    """The compiled product, on the float32 product's threads; None where it cannot build."""
    try:
        gemm = QuantGemm()
    except (BuildError, OSError):
        return None
    small = blas.small_gemm()
    if small is not None:
        gemm.use_pool(small.library)
    return gemm


def int8_activations() -> bool:
    """Whether products round activations to int8 here (see ``quant_gemm.c``);
    ``FLASHCHAT_QUANT_ACTIVATIONS=float`` keeps them float."""
    gemm = product()
    wanted = os.environ.get(ACTIVATIONS_SWITCH, "int8").strip().lower() != "float"
    return bool(gemm is not None and gemm.int8_activations() and wanted)


def describe() -> str:
    """One phrase: how quantized layers are multiplied here."""
    gemm = product()
    if gemm is None:
        return "MLX's own quantized kernels (the engine's product did not build)"
    if int8_activations():
        return f"int8 activations ({gemm.int8_instructions()})"
    return "float activations"
