"""Load the product over MLX's affine-quantized weights (``quant_gemm.c``), in one library with
the decoder layer built on it (``quant_layer.c``, driven by ``cpu/quant_layer.py``).

Built like the float32 product (``small_gemm.library_path``: the system C compiler,
``-march=native``, cached per machine) but loaded privately: nothing else calls it. Its
threads are the float32 product's pool (``use_pool``). Stdlib and numpy only. The arrays it
takes are MLX's own quantized layout: ``mx.quantize``'s packed ``uint32`` weights with float
scales and biases per group.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from engine_mlx.cpu.addresses import address
from engine_mlx.cpu.small_gemm import library_path

# The library: the product and, built on it, the decoder layer's few-row work (quant_layer.c).
SOURCE = Path(__file__).with_name("quant_layer.c")
BITS = (4, 8)
GROUPS = (32, 64, 128)


class QuantGemm:
    def __init__(self, march: str = "native") -> None:
        self.library = ctypes.CDLL(str(library_path(march, SOURCE)), mode=ctypes.RTLD_LOCAL)
        lib = self.library
        lib.fq_vector_width.restype = ctypes.c_int
        lib.fq_int8_activations.restype = ctypes.c_int
        lib.fq_set_pool.argtypes = [ctypes.c_void_p]
        lib.fq_gemm.restype = ctypes.c_int
        lib.fq_gemm.argtypes = [
            *(ctypes.c_int,) * 5, *(ctypes.c_void_p,) * 4, ctypes.c_int, ctypes.c_void_p,
            *(ctypes.c_int,) * 3,
        ]  # fmt: skip
        lib.fq_dequantize.restype = ctypes.c_int
        lib.fq_dequantize.argtypes = [
            *(ctypes.c_int,) * 4, *(ctypes.c_void_p,) * 3, ctypes.c_int, ctypes.c_void_p,
            *(ctypes.c_int,) * 2,
        ]  # fmt: skip
        lib.fq_panel_width.restype = ctypes.c_int
        lib.fq_layer_inputs.restype = ctypes.c_int
        lib.fq_layer_inputs.argtypes = [
            ctypes.c_void_p, ctypes.c_int, *(ctypes.c_void_p,) * 6, ctypes.c_int, ctypes.c_int
        ]  # fmt: skip
        lib.fq_layer_outputs.restype = ctypes.c_int
        lib.fq_layer_outputs.argtypes = [
            ctypes.c_void_p, ctypes.c_int, *(ctypes.c_void_p,) * 3, ctypes.c_int, ctypes.c_int
        ]  # fmt: skip

    def vector_width(self) -> int:
        """fp32 lanes per vector it was compiled for (16: AVX-512, 8: AVX2, 4: SSE/NEON)."""
        return self.library.fq_vector_width()

    def int8_activations(self) -> bool:
        """Whether this build can round x to int8 per group (AVX-512 VNNI and AVX2 builds)."""
        return bool(self.library.fq_int8_activations())

    def panel_width(self) -> int:
        """Weight rows per panel where this build multiplies 4-bit weights stored in panels
        (8: AVX2, see quant_panels.c), 0 where it keeps MLX's row layout."""
        return self.library.fq_panel_width()

    def int8_instructions(self) -> str:
        """The instructions its int8 dot products use, or "" where activations stay float."""
        return {512: "AVX-512 VNNI", 256: "AVX2"}.get(self.library.fq_int8_activations(), "")

    def use_pool(self, small_gemm: ctypes.CDLL) -> None:
        """Run on the float32 product's worker threads (its ``fc_parallel``)."""
        self.library.fq_set_pool(ctypes.cast(small_gemm.fc_parallel, ctypes.c_void_p))

    def matrix(
        self,
        packed: np.ndarray,
        scales: np.ndarray,
        biases: np.ndarray,
        *,
        bits: int,
        group: int,
        half: bool = True,
        panels: bool = False,
        packed_in_panels: bool = False,
    ) -> QuantizedMatrix:
        """The weights checked and held for repeated products; ValueError for a shape the
        layout cannot hold. ``half``: scales and biases that are float16 values held so.
        ``panels``: stored in panels where this build has them (then multiplied with int8
        activations only); ``packed_in_panels``: so, and ``packed`` is in panels already (its
        owner made it so, as ``to_panels`` does): only scales and biases are reordered."""
        return QuantizedMatrix(
            self, packed, scales, biases, bits, group, half, panels, packed_in_panels
        )

    def multiply(
        self,
        x: np.ndarray,
        packed: np.ndarray,
        scales: np.ndarray,
        biases: np.ndarray,
        *,
        bits: int,
        group: int,
        threads: int = 1,
        int8: bool = True,
    ) -> np.ndarray:
        """``x[m, k] @ W[n, k]^T`` with W = scales * q + biases per group (float32 out).
        ``int8``: round x to int8 per group where the build can (see quant_gemm.c)."""
        w = self.matrix(packed, scales, biases, bits=bits, group=group)
        return w.multiply(x, threads=threads, int8=int8)


HALF_PADDING = 32  # spare float16 entries after the last row's (see quant_gemm.c)


def to_panels(rows: np.ndarray, width: int) -> np.ndarray:
    """[n, c] rows of 4-byte words (or of groups' scales) -> panels of ``width`` rows, each
    panel's column c holding its rows' entries side by side (quant_panels.c); same shape."""
    n, c = rows.shape
    panels = rows.reshape(n // width, width, c).transpose(0, 2, 1)
    return np.ascontiguousarray(panels).reshape(n, c)


def from_panels(panels: np.ndarray, width: int) -> np.ndarray:
    """``to_panels``' inverse: MLX's row layout again."""
    n, c = panels.shape
    rows = panels.reshape(n // width, c, width).transpose(0, 2, 1)
    return np.ascontiguousarray(rows).reshape(n, c)


def _as_half(values: np.ndarray) -> np.ndarray | None:
    """``values`` as float16 with ``HALF_PADDING`` zeros after, or None unless every value
    converts exactly (a file's float16 scales, loaded as float32, always do)."""
    half = values.astype(np.float16)
    if not np.array_equal(half.astype(np.float32), values):
        return None
    padded = np.zeros(values.size + HALF_PADDING, dtype=np.float16)
    padded[: values.size] = half.reshape(-1)
    return padded


class QuantizedMatrix:
    """One weight matrix in MLX's quantized layout, its buffers kept alive and their addresses
    taken once: a decoding forward multiplies ~170 of them per token. Scales and biases that
    are float16 values are held as float16 (the model file's own), 10% fewer bytes a product
    at 4 bits. 4-bit weights asked for in ``panels`` are stored eight rows side by side where
    the build has that kernel (AVX2; ``panel`` is then 8, else 0)."""

    def __init__(
        self,
        gemm: QuantGemm,
        packed: np.ndarray,
        scales: np.ndarray,
        biases: np.ndarray,
        bits: int,
        group: int,
        half: bool = True,
        panels: bool = False,
        packed_in_panels: bool = False,
    ) -> None:
        if bits not in BITS or group not in GROUPS:
            raise ValueError(f"no quantized product for {bits} bits in groups of {group}")
        self.packed = np.ascontiguousarray(packed, dtype=np.uint32)
        self.scales = np.ascontiguousarray(scales, dtype=np.float32)
        self.biases = np.ascontiguousarray(biases, dtype=np.float32)
        n = self.packed.shape[0]
        k = self.packed.shape[1] * 32 // bits
        if self.packed.ndim != 2 or self.scales.shape != (n, k // group) or k % group:
            raise ValueError(f"weights of shape {packed.shape} do not hold {n}x{k} at {bits} bits")
        if self.biases.shape != self.scales.shape:
            raise ValueError("scales and biases must have the same shape")
        self.n, self.k, self.bits, self.group = n, k, bits, group
        width = gemm.panel_width() if (panels or packed_in_panels) and bits == 4 else 0
        self.panel = width if width and n % width == 0 else 0
        if packed_in_panels and not self.panel:
            raise ValueError(f"this build does not multiply {n} rows of {bits} bits in panels")
        if self.panel:
            if not packed_in_panels:
                self.packed = to_panels(self.packed, self.panel)
            self.scales = to_panels(self.scales, self.panel)
            self.biases = to_panels(self.biases, self.panel)
        self._gemm = gemm
        self._call = gemm.library.fq_gemm
        self._unpack = gemm.library.fq_dequantize
        halves = (_as_half(self.scales), _as_half(self.biases)) if half else (None, None)
        self.half = halves[0] is not None and halves[1] is not None
        if self.half:
            self.scales, self.biases = halves  # the float32 copies are not kept
        self._pointers = (
            address(self.packed),
            address(self.scales),
            address(self.biases),
        )

    def rows(self, ids: np.ndarray) -> QuantizedMatrix:
        """A new matrix of rows ``ids`` of this one (a draft vocabulary's head)."""
        groups = self.k // self.group

        def rows(values: np.ndarray) -> np.ndarray:  # [n, groups] in row order
            table = values[: self.n * groups].reshape(self.n, groups)
            return from_panels(table, self.panel) if self.panel else table

        packed = from_panels(self.packed, self.panel) if self.panel else self.packed
        return QuantizedMatrix(
            self._gemm, packed[ids], rows(self.scales)[ids].astype(np.float32),
            rows(self.biases)[ids].astype(np.float32), self.bits, self.group,
            panels=bool(self.panel),
        )  # fmt: skip

    def __deepcopy__(self, memo: dict) -> QuantizedMatrix:
        return self  # the weights never change: a copied layer may share them

    def multiply(self, x: np.ndarray, *, threads: int = 1, int8: bool = True) -> np.ndarray:
        """``x[m, k] @ W^T`` as a new float32 [m, n] array."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.k:
            raise ValueError(f"x of shape {x.shape} does not meet weights of {self.k} columns")
        if self.panel and not int8:
            raise ValueError("weights stored in panels multiply with int8 activations only")
        y = np.empty((x.shape[0], self.n), dtype=np.float32)
        status = self._call(
            x.shape[0], self.n, self.k, self.bits, self.group, address(x), *self._pointers,
            int(self.half), address(y), threads, int(int8), self.panel,
        )  # fmt: skip
        if status == -2:
            raise MemoryError("no memory for the quantized product's scratch space")
        if status != 0:
            raise ValueError(f"no quantized product for x of shape {x.shape}")
        return y

    def dequantize(self, begin: int, out: np.ndarray, *, threads: int = 1) -> np.ndarray:
        """Rows ``begin : begin + len(out)`` of W as float32, written into ``out`` ([rows, k],
        C-contiguous float32)."""
        rows = out.shape[0]
        if out.shape[1:] != (self.k,) or out.dtype != np.float32 or not out.flags.c_contiguous:
            raise ValueError(f"out must be a C-contiguous float32 [rows, {self.k}] array")
        if begin < 0 or begin + rows > self.n:
            raise ValueError(f"rows {begin}:{begin + rows} are not within the {self.n} rows")
        if self.panel and begin % self.panel:
            raise ValueError(f"rows of panels begin at a multiple of {self.panel}, not {begin}")
        offset = begin * self.k * self.bits // 8  # bytes of packed weights before ``begin``
        skipped = begin * (self.k // self.group) * (2 if self.half else 4)  # scales' bytes
        status = self._unpack(
            rows, self.k, self.bits, self.group, self._pointers[0] + offset,
            self._pointers[1] + skipped, self._pointers[2] + skipped, int(self.half),
            address(out), threads, self.panel,
        )  # fmt: skip
        if status != 0:
            raise ValueError(f"no dequantization for {self.bits} bits in groups of {self.group}")
        return out


class HalfMatrix(QuantizedMatrix):
    """Float16 weights for the same product (bits 16): a float16 checkpoint computed in
    float32 reads each weight as its file holds it, half of float32's bytes, through the
    quantized layers' tiles and the C decoder layer. ``weights`` [n, k] must hold float16
    values exactly (ValueError otherwise: the product would not be the model's)."""

    def __init__(self, gemm: QuantGemm, weights: np.ndarray) -> None:
        if weights.ndim != 2 or weights.shape[1] % gemm.vector_width():
            raise ValueError(f"no float16 product for weights of shape {weights.shape}")
        half = np.ascontiguousarray(weights, dtype=np.float16)
        if weights.dtype != np.float16 and not np.array_equal(half, weights):
            raise ValueError("the weights are not float16 values")
        self.packed = half
        self.scales = self.biases = np.zeros(HALF_PADDING, dtype=np.float16)  # never read
        self.n, self.k = half.shape
        self.bits, self.group, self.half, self.panel = 16, self.k, False, 0
        self._gemm = gemm
        self._call = gemm.library.fq_gemm
        self._unpack = gemm.library.fq_dequantize
        self._pointers = (address(half), address(self.scales), address(self.biases))

    def rows(self, ids: np.ndarray) -> HalfMatrix:
        return HalfMatrix(self._gemm, self.packed[ids])
