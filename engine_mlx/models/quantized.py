"""MLX-quantized layers on the CPU through the engine's own product (``cpu/quant_gemm.c``).

MLX's CPU kernel for ``quantized_matmul`` is a plain loop: mlx-lm decodes the 4-bit demo
(Qwen2.5-Coder-0.5B) at 0.33 s a token on the 2-core Xeon, 13x the engine's forward with the
product below. So on the CPU every affine-quantized linear layer
(and a quantized embedding used as the tied output head) of a target is swapped for a subclass
whose product leaves MLX's graph: the input is evaluated, multiplied by ``quant_gemm`` straight
from MLX's own weight buffers (no copy), and the result goes back in as a new array. Gated
MLPs become one step (``CpuQuantizedMLP``), and the target rotates queries and keys in numpy
(``numpy_rope``): both were MLX dispatch more than arithmetic.

Why not an MLX C++ extension: leaving the graph costs one evaluation at each point a forward
leaves it (~20 us on the 2-core Xeon, 80-100 us on the 2-core EPYC VM); decoding and
verification rows of the usual dense layers therefore skip MLX's graph altogether
(``numpy_layers``), which an extension could not beat, and an extension would have to be
compiled against the exact MLX headers of every install. Prefill's many rows
(``PREFILL_ROWS``) go to the BLAS on weights dequantized a block at a time, which measured
faster; a verification never does.

``FLASHCHAT_QUANT_ACTIVATIONS=float`` (``cpu/quantized_product``) keeps activations float where
the build rounds them to int8 (AVX-512 VNNI or AVX2), for measuring what the rounding changes
(``scripts/compare_quant_activations.py``).
"""

from __future__ import annotations

import ctypes
import functools
import os
from typing import Any

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map_with_path

from engine_mlx import blas, compute_path
from engine_mlx.cpu.quant_gemm import BITS, GROUPS, QuantizedMatrix
from engine_mlx.cpu.quantized_product import int8_activations, product
from engine_mlx.models import attention

THREADS = 64  # as many as the shared pool has (one per core)
PREFILL_ROWS = 128  # from here the BLAS on dequantized weights is faster (2-core Xeon)
BLAS_BLOCK = 2048  # weight rows dequantized at a time (7 MB at 896 columns; whole panels)
# Weights in panels where the build multiplies them (quant_panels.c); FLASHCHAT_PANELS=0 keeps
# MLX's row layout, to measure one against the other.
PANELS = os.environ.get("FLASHCHAT_PANELS", "1") != "0"
ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS's enums


def _matrix(layer: nn.Module, int8: bool) -> QuantizedMatrix | None:
    gemm = product()
    if gemm is None or getattr(layer, "mode", "affine") != "affine":
        return None
    if layer.bits not in BITS or layer.group_size not in GROUPS or layer.get("biases") is None:
        return None
    if layer.scales.dtype != mx.float32:
        return None  # half-precision scales: the model is not computed in float32
    width = gemm.panel_width() if int8 and PANELS and layer.bits == 4 else 0
    in_panels = bool(width) and layer.weight.ndim == 2 and layer.weight.shape[0] % width == 0
    packed = _panel_weights(layer, width) if in_panels else np.asarray(layer.weight)
    arrays = [np.asarray(layer[name]) for name in ("scales", "biases")]
    try:
        return gemm.matrix(
            packed, *arrays, bits=layer.bits, group=layer.group_size, packed_in_panels=in_panels
        )
    except ValueError:
        return None


def _panel_weights(layer: nn.Module, width: int) -> np.ndarray:
    """``layer``'s packed weights in panels (``cpu/quant_panels.c``), in a buffer MLX owns, as
    a numpy view that keeps it alive; the layer's own ``weight`` becomes a lazy MLX expression
    of MLX's row layout over that buffer, evaluated only where MLX's kernels run (an input not
    in float32, a dequantized copy), so the weights are not held twice."""
    n, words = layer.weight.shape
    panels = layer.weight.reshape(n // width, width, words).transpose(0, 2, 1).reshape(n, words)
    mx.eval(panels)
    layer.weight = panels.reshape(n // width, words, width).transpose(0, 2, 1).reshape(n, words)
    return np.asarray(panels)


@functools.cache
def _sgemm() -> Any:
    """The float32 product's ``cblas_sgemm`` (it hands products of many rows to the BLAS
    chosen for this machine), or None without it."""
    small = blas.small_gemm()
    if small is None:
        return None
    sgemm = small.library.cblas_sgemm
    sgemm.restype = None
    matrix = (ctypes.c_void_p, ctypes.c_int)  # a pointer and its leading dimension
    scalar = (ctypes.c_float,)
    sgemm.argtypes = [*(ctypes.c_int,) * 6, *scalar, *matrix, *matrix, *scalar, *matrix]
    return sgemm


def multiply_rows(matrix: QuantizedMatrix, rows: np.ndarray, int8: bool) -> np.ndarray:
    """``rows @ W^T``: the few-row product, or for prefill's many rows the weights
    dequantized a block at a time for the BLAS (faster from ``PREFILL_ROWS`` rows). A
    verification forward always takes the product, however large its tree: its rows must be
    the bits plain decoding computes."""
    sgemm = _sgemm()
    if rows.shape[0] < PREFILL_ROWS or sgemm is None or attention.verifying():
        return matrix.multiply(rows, threads=THREADS, int8=int8)
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    m, n, k = rows.shape[0], matrix.n, matrix.k
    y = np.empty((m, n), dtype=np.float32)
    block = np.empty((min(BLAS_BLOCK, n), k), dtype=np.float32)
    for begin in range(0, n, BLAS_BLOCK):
        weights = matrix.dequantize(begin, block[: min(BLAS_BLOCK, n - begin)], threads=THREADS)
        sgemm(ROW_MAJOR, NO_TRANS, TRANS, m, len(weights), k, 1.0, rows.ctypes.data, k,
              weights.ctypes.data, k, 0.0, y.ctypes.data + 4 * begin, n)  # fmt: skip
    return y


def multiply_mx(
    matrix: QuantizedMatrix, x: mx.array, int8: bool, bias: np.ndarray | None = None
) -> mx.array:
    """``x @ W^T`` (+ ``bias``) for an MLX array ``x`` [..., k], evaluated here."""
    rows = np.asarray(x.reshape(-1, matrix.k))
    y = multiply_rows(matrix, rows, int8)
    if bias is not None:
        y += bias
    return mx.array(y).reshape(*x.shape[:-1], matrix.n)


class CpuQuantizedLinear(nn.QuantizedLinear):
    """``nn.QuantizedLinear`` with the engine's product for float32 inputs."""

    def __init__(self, layer: nn.QuantizedLinear, matrix: QuantizedMatrix, int8: bool) -> None:
        nn.Module.__init__(self)
        self.group_size, self.bits, self.mode = layer.group_size, layer.bits, layer.mode
        self.weight, self.scales, self.biases = layer.weight, layer.scales, layer.biases
        self._bias = None
        if "bias" in layer:
            self.bias = layer.bias
            self._bias = np.asarray(layer.bias) if layer.bias.dtype == mx.float32 else None
        self._matrix = matrix
        self._int8 = int8
        self.freeze()

    def __call__(self, x: mx.array) -> mx.array:
        if x.dtype != mx.float32 or ("bias" in self and self._bias is None):
            return super().__call__(x)
        return multiply_mx(self._matrix, x, self._int8, self._bias)


class CpuQuantizedEmbedding(nn.QuantizedEmbedding):
    """``nn.QuantizedEmbedding`` whose ``as_linear`` (a tied output head) uses the product."""

    def __init__(self, layer: nn.QuantizedEmbedding, matrix: QuantizedMatrix, int8: bool) -> None:
        nn.Module.__init__(self)
        self.group_size, self.bits, self.mode = layer.group_size, layer.bits, layer.mode
        self.num_embeddings, self.dims = layer.num_embeddings, layer.dims
        self.weight, self.scales, self.biases = layer.weight, layer.scales, layer.biases
        self._matrix = matrix
        self._int8 = int8
        self.freeze()

    def as_linear(self, x: mx.array) -> mx.array:
        if x.dtype != mx.float32:
            return super().as_linear(x)
        return multiply_mx(self._matrix, x, self._int8)


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

    def numpy_ready(self) -> bool:
        """Whether all three products are the engine's (not, e.g., a dequantized copy's)."""
        return all(engine_product(p) for p in (self.gate_proj, self.up_proj, self.down_proj))

    def numpy_forward(self, rows: np.ndarray) -> np.ndarray:
        """The MLP of ``rows`` [L, in] as numpy, [L, out]."""
        gate, up, down = self.gate_proj, self.up_proj, self.down_proj
        g = multiply_rows(gate._matrix, rows, gate._int8)
        u = multiply_rows(up._matrix, rows, up._int8)
        with np.errstate(over="ignore", under="ignore"):  # saturated gates: silu -> -0 or g
            hidden = g / (1.0 + np.exp(-g)) * u
        return multiply_rows(down._matrix, hidden, down._int8)

    def __call__(self, x: mx.array) -> mx.array:
        gate, up, down = self.gate_proj, self.up_proj, self.down_proj
        if x.dtype != mx.float32 or not self.numpy_ready():  # e.g. an MTP head's copy
            return down(nn.silu(gate(x)) * up(x))
        y = self.numpy_forward(np.asarray(x.reshape(-1, gate._matrix.k)))
        return mx.array(y).reshape(*x.shape[:-1], down._matrix.n)


def engine_product(layer: Any) -> bool:
    """Whether ``layer`` multiplies through the engine's product: quantized weights, or a
    float16 checkpoint's (``half_layers``)."""
    return getattr(layer, "_matrix", None) is not None and isinstance(layer, nn.Module)


def _fusable_mlp(module: Any) -> bool:
    parts = [getattr(module, name, None) for name in ("gate_proj", "up_proj", "down_proj")]
    return type(module) in _swiglu_mlp_types() and all(
        engine_product(part) and "bias" not in part for part in parts
    )


def fuse_mlps(model: nn.Module) -> None:
    """Make every gated MLP whose three products are the engine's one step (``CpuQuantizedMLP``)."""
    for _, module in model.named_modules():
        mlp = getattr(module, "mlp", None)
        if _fusable_mlp(mlp):
            module.mlp = CpuQuantizedMLP(mlp)


def install(model: nn.Module, *, int8: bool = True) -> int:
    """Swap ``model``'s quantized layers for the CPU product's (on the CPU backend only);
    returns how many were swapped. Layers the product cannot take keep MLX's kernels.
    ``int8``: round activations to int8 where this machine can (``int8_activations``)."""
    if not compute_path.cpu_path():
        return 0
    int8 = int8 and int8_activations()
    swapped = 0

    def swap(_path: str, module: Any) -> Any:
        nonlocal swapped
        kinds = ((nn.QuantizedLinear, CpuQuantizedLinear), (nn.QuantizedEmbedding,
                 CpuQuantizedEmbedding))  # fmt: skip
        for kind, replacement in kinds:
            if type(module) is kind:
                matrix = _matrix(module, int8)
                if matrix is None:
                    return module
                swapped += 1
                return replacement(module, matrix, int8)
        return module

    leaves = tree_map_with_path(swap, model.leaf_modules(), is_leaf=nn.Module.is_module)
    model.update_modules(leaves)
    fuse_mlps(model)
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


def rounds_activations(model: nn.Module) -> bool:
    """Whether any of ``model``'s layers multiplies with activations rounded to int8."""
    return any(getattr(m, "_int8", False) for _, m in model.named_modules())
