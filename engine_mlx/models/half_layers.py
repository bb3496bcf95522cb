"""A float16 checkpoint's linear layers on the CPU's quantized path, with float16 weights.

On the CPU a target computes in float32 (``backend.compute_dtype``), and a float model's
layers went through MLX's graph: one product and a dozen small operations at a time, each an
evaluation on MLX's stream thread, with float32 weights (twice the checkpoint's bytes) read
every token. SmolLM2-135M in float16 decoded at 13-17 tok/s on the 2-core EPYC this way, a
seventh of llama.cpp's speed on the same model quantized. Here every ``nn.Linear`` (and a tied
embedding's ``as_linear``) whose weights are float16 values becomes the engine's product over
those float16 weights (``cpu/quant_gemm.HalfMatrix``), so the decoder layers run through the C
layer (``numpy_layers``) exactly as a quantized target's do: row by row, decoding and
verification the same bits. Weights that are not float16 values (a float32 or bfloat16
checkpoint) keep MLX's graph and the small-batch product.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map_with_path

from engine_mlx import compute_path
from engine_mlx.cpu.quant_gemm import HalfMatrix
from engine_mlx.cpu.quantized_product import product
from engine_mlx.models.quantized import fuse_mlps, multiply_mx


def _matrix(weight: mx.array) -> HalfMatrix | None:
    gemm = product()
    if gemm is None or weight.ndim != 2 or weight.dtype not in (mx.float32, mx.float16):
        return None
    try:
        return HalfMatrix(gemm, np.asarray(weight))
    except ValueError:
        return None


def _float16_checkpoint(model: nn.Module) -> bool:
    """Whether the first linear layer's first row holds float16 values: a checkpoint is
    stored in one dtype, so a float32 or bfloat16 one is told at once, not by converting and
    comparing every matrix at load."""
    for _, module in model.named_modules():
        if type(module) in (nn.Linear, nn.Embedding) and module.weight.dtype == mx.float32:
            row = np.asarray(module.weight[0])
            return bool(np.array_equal(row.astype(np.float16), row))
    return False


class CpuHalfLinear(nn.Linear):
    """``nn.Linear`` with the engine's product over its float16 weights, for float32 inputs."""

    def __init__(self, layer: nn.Linear, matrix: HalfMatrix) -> None:
        nn.Module.__init__(self)
        self.weight = layer.weight
        self._bias = None
        if "bias" in layer:
            self.bias = layer.bias
            self._bias = np.asarray(layer.bias) if layer.bias.dtype == mx.float32 else None
        self._matrix = matrix
        self._int8 = False
        self.freeze()

    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype != mx.float32 or ("bias" in self and self._bias is None):
            return super().__call__(x)
        return multiply_mx(self._matrix, x, False, self._bias)


class CpuHalfEmbedding(nn.Embedding):
    """``nn.Embedding`` whose ``as_linear`` (a tied output head) uses the product."""

    def __init__(self, layer: nn.Embedding, matrix: HalfMatrix) -> None:
        nn.Module.__init__(self)
        self.weight = layer.weight
        self._matrix = matrix
        self._int8 = False
        self.freeze()

    def as_linear(self, x: mx.array) -> mx.array:
        if x.dtype != mx.float32:
            return super().as_linear(x)
        return multiply_mx(self._matrix, x, False)


def install(model: nn.Module) -> int:
    """Swap ``model``'s float16-valued linear layers (and embedding, for a tied head) for the
    product's, on the CPU backend with float32 compute; returns how many were swapped."""
    if not compute_path.cpu_path() or not _float16_checkpoint(model):
        return 0
    swapped = 0

    def swap(_path: str, module: Any) -> Any:
        nonlocal swapped
        kinds = ((nn.Linear, CpuHalfLinear), (nn.Embedding, CpuHalfEmbedding))
        for kind, replacement in kinds:
            if type(module) is kind and module.weight.dtype == mx.float32:
                matrix = _matrix(module.weight)
                if matrix is None:
                    return module
                swapped += 1
                return replacement(module, matrix)
        return module

    leaves = tree_map_with_path(swap, model.leaf_modules(), is_leaf=nn.Module.is_module)
    model.update_modules(leaves)
    fuse_mlps(model)
    return swapped
