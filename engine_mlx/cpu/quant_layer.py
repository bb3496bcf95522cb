"""A quantized decoder layer's work around its attention, two calls into C (``quant_layer.c``).

The C side holds a description of the layer (``fq_layer``: shapes, norms, the seven weight
matrices) built once here from the numpy views the engine already keeps; each forward then
passes only its rows. Stdlib and numpy only.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from engine_mlx.cpu.addresses import address
from engine_mlx.cpu.quant_gemm import QuantGemm, QuantizedMatrix


class _Matrix(ctypes.Structure):
    _fields_ = [
        ("q", ctypes.c_void_p),
        ("scales", ctypes.c_void_p),
        ("biases", ctypes.c_void_p),
        ("bias", ctypes.c_void_p),
        ("n", ctypes.c_int),
        ("k", ctypes.c_int),
        ("bits", ctypes.c_int),
        ("group", ctypes.c_int),
        ("half", ctypes.c_int),
        ("panel", ctypes.c_int),
    ]


class _Layer(ctypes.Structure):
    _fields_ = [
        *((name, ctypes.c_int) for name in ("hidden", "heads", "kv_heads", "head_dim")),
        ("rope_dims", ctypes.c_int),
        ("rope_traditional", ctypes.c_int),
        *((name, ctypes.c_float) for name in ("input_eps", "mlp_eps", "q_eps", "k_eps")),
        *((name, ctypes.c_void_p) for name in ("input_norm", "mlp_norm", "q_norm", "k_norm")),
        *((name, _Matrix) for name in ("q", "k", "v", "o", "gate", "up", "down")),
    ]


Norm = tuple[np.ndarray, float]  # an RMS norm's weight and epsilon


@dataclass(frozen=True)
class LayerShape:
    heads: int
    kv_heads: int
    head_dim: int
    rope_dims: int
    rope_traditional: bool


@dataclass(frozen=True)
class LayerWeights:
    """A pre-norm layer's weights: norms (``q_norm``/``k_norm`` None where the architecture
    has none), the products' matrices and the attention products' biases (None: none)."""

    input_norm: Norm
    mlp_norm: Norm
    q_norm: Norm | None
    k_norm: Norm | None
    matrices: dict[str, QuantizedMatrix]  # q, k, v, o, gate, up, down
    biases: dict[str, np.ndarray | None]  # q, k, v, o


class QuantLayer:
    """One layer's two calls. ``inputs``: h [rows, hidden] -> queries [rows, heads, d], keys and
    values [kv_heads, rows, d]; ``outputs``: h and the attention's [rows, heads * d] -> the
    layer's output rows."""

    def __init__(self, gemm: QuantGemm, shape: LayerShape, weights: LayerWeights) -> None:
        self._gemm = gemm
        self.shape = shape
        self.hidden = weights.matrices["q"].k
        self._keep: list[object] = []  # everything the C side points into
        layer = _Layer(
            hidden=self.hidden, heads=shape.heads, kv_heads=shape.kv_heads,
            head_dim=shape.head_dim, rope_dims=shape.rope_dims,
            rope_traditional=int(shape.rope_traditional),
        )  # fmt: skip
        for name in ("input_norm", "mlp_norm", "q_norm", "k_norm"):
            norm = getattr(weights, name)
            if norm is not None:
                setattr(layer, name, self._address(norm[0]))
                setattr(layer, name.replace("_norm", "_eps"), norm[1])
        for name, matrix in weights.matrices.items():
            bias = weights.biases.get(name)
            bias_address = self._address(bias) if bias is not None else None
            setattr(layer, name, _Matrix(
                *matrix._pointers, bias_address, matrix.n, matrix.k, matrix.bits, matrix.group,
                int(matrix.half), matrix.panel,
            ))  # fmt: skip
            self._keep.append(matrix)
        self._layer = layer
        self._pointer = ctypes.addressof(layer)

    def _address(self, array: np.ndarray) -> int:
        array = np.ascontiguousarray(array, dtype=np.float32)
        self._keep.append(array)
        return address(array)

    def inputs(
        self, h: np.ndarray, cos: np.ndarray, sin: np.ndarray, *, threads: int, int8: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s, rows = self.shape, h.shape[0]
        h = np.ascontiguousarray(h, dtype=np.float32)
        queries = np.empty((rows, s.heads, s.head_dim), dtype=np.float32)
        keys = np.empty((s.kv_heads, rows, s.head_dim), dtype=np.float32)
        values = np.empty_like(keys)
        status = self._gemm.library.fq_layer_inputs(
            self._pointer, rows, address(h), address(cos), address(sin),
            address(queries), address(keys), address(values), threads, int(int8),
        )  # fmt: skip
        _check(status)
        return queries, keys, values

    def outputs(
        self, h: np.ndarray, attention: np.ndarray, *, threads: int, int8: bool
    ) -> np.ndarray:
        h = np.ascontiguousarray(h, dtype=np.float32)
        attention = np.ascontiguousarray(attention, dtype=np.float32)
        out = np.empty_like(h)
        status = self._gemm.library.fq_layer_outputs(
            self._pointer, h.shape[0], address(h), address(attention), address(out),
            threads, int(int8),
        )  # fmt: skip
        _check(status)
        return out


def _check(status: int) -> None:
    if status == -2:
        raise MemoryError("no memory for the quantized layer's scratch space")
    if status != 0:
        raise ValueError("the quantized layer cannot run these rows")
