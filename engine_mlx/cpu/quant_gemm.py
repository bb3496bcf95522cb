"""Load the few-row product over MLX's affine-quantized weights (``quant_gemm.c``).

Built like the float32 product (``small_gemm.library_path``: the system C compiler,
``-march=native``, cached per machine) but loaded privately: nothing else calls it. Stdlib
and numpy only. The arrays it takes are MLX's own quantized layout: ``mx.quantize``'s packed
``uint32`` weights with float scales and biases per group.
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from engine_mlx.cpu.small_gemm import library_path

SOURCE = Path(__file__).with_name("quant_gemm.c")
MAX_ROWS = 32


class QuantGemm:
    def __init__(self, march: str = "native") -> None:
        self.library = ctypes.CDLL(str(library_path(march, SOURCE)), mode=ctypes.RTLD_LOCAL)
        self.library.fq_vector_width.restype = ctypes.c_int
        self.library.fq_gemm.restype = ctypes.c_int
        self.library.fq_gemm.argtypes = [
            *(ctypes.c_int,) * 5,
            *(ctypes.c_void_p,) * 5,
            ctypes.c_int,
        ]

    def vector_width(self) -> int:
        """fp32 lanes per vector it was compiled for (16: AVX-512, 8: AVX2, 4: SSE/NEON)."""
        return self.library.fq_vector_width()

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
    ) -> np.ndarray:
        """``x[m, k] @ W[n, k]^T`` with W = scales * q + biases per group (float32 out);
        ValueError for shapes the layout cannot hold."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        packed = np.ascontiguousarray(packed, dtype=np.uint32)
        scales = np.ascontiguousarray(scales, dtype=np.float32)
        biases = np.ascontiguousarray(biases, dtype=np.float32)
        m, k = x.shape
        n = packed.shape[0]
        if packed.shape[1] * 32 // bits != k or scales.shape != (n, k // group):
            raise ValueError(f"weights of shape {packed.shape} do not hold {n}x{k} at {bits} bits")
        if biases.shape != scales.shape:
            raise ValueError("scales and biases must have the same shape")
        y = np.empty((m, n), dtype=np.float32)
        status = self.library.fq_gemm(
            m, n, k, bits, group,
            x.ctypes.data, packed.ctypes.data, scales.ctypes.data, biases.ctypes.data,
            y.ctypes.data, threads,
        )  # fmt: skip
        if status != 0:
            raise ValueError(f"no quantized product for m={m}, k={k}, bits={bits}, group={group}")
        return y
