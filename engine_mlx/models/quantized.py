"""MLX-quantized layers on the CPU through the engine's own product (``cpu/quant_gemm.c``).

MLX's CPU kernel for ``quantized_matmul`` is a plain loop: a 4-bit Qwen2.5-0.5B did not finish
one 12-token timing in five minutes here. So on the CPU every affine-quantized linear layer
(and a quantized embedding used as the tied output head) of a target is swapped for a subclass
whose product leaves MLX's graph: the input is evaluated, multiplied by ``quant_gemm`` straight
from MLX's own weight buffers (no copy), and the result goes back in as a new array.

Leaving the graph per layer costs a little (measured in ``scripts/bench_quant_product.py
--layers``), and it was chosen over an MLX C++ extension by that measurement: the extension
would save only that cost, and would have to be built against the exact MLX headers of each
install. Prefill goes the same way: the product takes any number of rows.

``FLASHCHAT_QUANT_ACTIVATIONS=float`` keeps activations float on machines whose build rounds
them to int8 (AVX-512 VNNI), for measuring what the rounding changes.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map_with_path

from engine_mlx import blas
from engine_mlx.cpu.quant_gemm import BITS, GROUPS, QuantGemm, QuantizedMatrix
from engine_mlx.cpu.small_gemm import BuildError

ACTIVATIONS_SWITCH = "FLASHCHAT_QUANT_ACTIVATIONS"
THREADS = 64  # as many as the shared pool has (one per core)


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
    """Whether products round activations to int8 here (see ``quant_gemm.c``)."""
    gemm = product()
    wanted = os.environ.get(ACTIVATIONS_SWITCH, "int8").strip().lower() != "float"
    return bool(gemm is not None and gemm.int8_activations() and wanted)


def describe() -> str:
    """One phrase for ``info`` and the bench: how quantized layers are multiplied here."""
    if product() is None:
        return "MLX's own quantized kernels (the engine's product did not build)"
    return "int8 activations (AVX-512 VNNI)" if int8_activations() else "float activations"


def _matrix(layer: nn.Module) -> QuantizedMatrix | None:
    gemm = product()
    if gemm is None or getattr(layer, "mode", "affine") != "affine":
        return None
    if layer.bits not in BITS or layer.group_size not in GROUPS or layer.get("biases") is None:
        return None
    arrays = [np.asarray(layer[name]) for name in ("weight", "scales", "biases")]
    if arrays[1].dtype != np.float32:
        return None  # half-precision scales: the model is not computed in float32
    try:
        return gemm.matrix(*arrays, bits=layer.bits, group=layer.group_size)
    except ValueError:
        return None


def _multiply(
    matrix: QuantizedMatrix, x: mx.array, int8: bool, bias: np.ndarray | None = None
) -> mx.array:
    rows = np.asarray(x.reshape(-1, matrix.k))
    y = matrix.multiply(rows, threads=THREADS, int8=int8)
    if bias is not None:
        y += bias
    return mx.array(y).reshape(*x.shape[:-1], matrix.n)


class CpuQuantizedLinear(nn.QuantizedLinear):
    """``nn.QuantizedLinear`` with the engine's product for float32 inputs."""

    def __init__(self, layer: nn.QuantizedLinear, matrix: QuantizedMatrix) -> None:
        nn.Module.__init__(self)
        self.group_size, self.bits, self.mode = layer.group_size, layer.bits, layer.mode
        self.weight, self.scales, self.biases = layer.weight, layer.scales, layer.biases
        self._bias = None
        if "bias" in layer:
            self.bias = layer.bias
            self._bias = np.asarray(layer.bias) if layer.bias.dtype == mx.float32 else None
        self._matrix = matrix
        self._int8 = int8_activations()
        self.freeze()

    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype != mx.float32 or ("bias" in self and self._bias is None):
            return super().__call__(x)
        return _multiply(self._matrix, x, self._int8, self._bias)


class CpuQuantizedEmbedding(nn.QuantizedEmbedding):
    """``nn.QuantizedEmbedding`` whose ``as_linear`` (a tied output head) uses the product."""

    def __init__(self, layer: nn.QuantizedEmbedding, matrix: QuantizedMatrix) -> None:
        nn.Module.__init__(self)
        self.group_size, self.bits, self.mode = layer.group_size, layer.bits, layer.mode
        self.num_embeddings, self.dims = layer.num_embeddings, layer.dims
        self.weight, self.scales, self.biases = layer.weight, layer.scales, layer.biases
        self._matrix = matrix
        self._int8 = int8_activations()
        self.freeze()

    def as_linear(self, x: mx.array) -> mx.array:
        if x.dtype != mx.float32:
            return super().as_linear(x)
        return _multiply(self._matrix, x, self._int8)


def _swiglu_mlp_types() -> tuple[type, ...]:
    """mlx-lm's MLPs that are ``down(swiglu(gate(x), up(x)))``, read from their source."""
    from mlx_lm.models import llama, qwen2, qwen3, qwen3_next

    return llama.MLP, qwen2.MLP, qwen3.MLP, qwen3_next.Qwen3NextMLP


class CpuQuantizedMLP(nn.Module):
    """A gated MLP whose three products are the engine's: its input is evaluated once and the
    activation ``silu(gate) * up`` computed in numpy between them, so MLX's graph is left
    once per MLP instead of three times, and MLX's element-by-element ``exp`` (~14 ns an
    element here) is not paid. Row by row the same arithmetic for any number of rows: plain
    decoding and verification agree bit for bit."""

    def __init__(self, mlp: nn.Module) -> None:
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = mlp.gate_proj, mlp.up_proj, mlp.down_proj

    def __call__(self, x: mx.array) -> mx.array:
        gate, up, down = self.gate_proj, self.up_proj, self.down_proj
        ours = all(isinstance(part, CpuQuantizedLinear) for part in (gate, up, down))
        if x.dtype != mx.float32 or not ours:  # e.g. a dequantized copy (an MTP head's)
            return down(nn.silu(gate(x)) * up(x))
        rows = np.asarray(x.reshape(-1, gate._matrix.k))
        g = gate._matrix.multiply(rows, threads=THREADS, int8=gate._int8)
        u = up._matrix.multiply(rows, threads=THREADS, int8=up._int8)
        with np.errstate(over="ignore", under="ignore"):  # saturated gates: silu -> -0 or g
            hidden = g / (1.0 + np.exp(-g)) * u
        y = down._matrix.multiply(hidden, threads=THREADS, int8=down._int8)
        return mx.array(y).reshape(*x.shape[:-1], down._matrix.n)


def _fusable_mlp(module: Any) -> bool:
    parts = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    return type(module) in _swiglu_mlp_types() and all(
        type(part) is CpuQuantizedLinear and "bias" not in part for part in parts
    )


def install(model: nn.Module) -> int:
    """Swap ``model``'s quantized layers for the CPU product's (on the CPU backend only);
    returns how many were swapped. Layers the product cannot take keep MLX's kernels."""
    if mx.default_device() != mx.cpu:
        return 0
    swapped = 0

    def swap(_path: str, module: Any) -> Any:
        nonlocal swapped
        kinds = ((nn.QuantizedLinear, CpuQuantizedLinear), (nn.QuantizedEmbedding,
                 CpuQuantizedEmbedding))  # fmt: skip
        for kind, replacement in kinds:
            if type(module) is kind:
                matrix = _matrix(module)
                if matrix is None:
                    return module
                swapped += 1
                return replacement(module, matrix)
        return module

    leaves = tree_map_with_path(swap, model.leaf_modules(), is_leaf=nn.Module.is_module)
    model.update_modules(leaves)
    for _, module in model.named_modules():
        mlp = getattr(module, "mlp", None)
        if _fusable_mlp(mlp):
            module.mlp = CpuQuantizedMLP(mlp)
    return swapped


def dequantized(module: nn.Module) -> nn.Module:
    """``module`` with its quantized linear layers made plain ``nn.Linear`` ones (the weights
    dequantized): the MTP head is modelled on a target layer but holds float weights."""

    def plain(_path: str, layer: Any) -> Any:
        if not isinstance(layer, nn.QuantizedLinear):
            return layer
        weight = mx.dequantize(
            layer.weight, layer.scales, layer.get("biases"), layer.group_size, layer.bits,
            mode=layer.mode,
        )  # fmt: skip
        out_dims, in_dims = weight.shape
        linear = nn.Linear(in_dims, out_dims, bias="bias" in layer)
        linear.weight = weight
        if "bias" in layer:
            linear.bias = layer.bias
        return linear

    module.update_modules(
        tree_map_with_path(plain, module.leaf_modules(), is_leaf=nn.Module.is_module)
    )
    return module
