"""The quantized product (engine_mlx/cpu/quant_gemm.c) beside the float32 one, cache-cold.

    .venv/bin/python scripts/bench_quant_product.py

24 different 4864x896 weight matrices (Qwen2.5-0.5B's MLP shape; 418 MB as float32) are
multiplied in turn, as a decoding forward streams its layers, with 1-16 rows of x; the 25th
percentile of the per-matrix time. MLX's affine layout, groups of 64, two threads (the
float32 product's pool for both). Quantized: with int8 activations (AVX-512 VNNI and AVX2
builds) and with float activations; at 4 bits also in panels of eight rows where the build
has them (AVX2: cpu/quant_panels.c), the engine's layout there.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mlx.core as mx
import numpy as np

import engine_mlx  # noqa: F401  (the BLAS before mlx is used)
from engine_mlx.bench.measure import machine_description
from engine_mlx.cpu.quant_gemm import QuantGemm
from engine_mlx.cpu.small_gemm import SmallGemm, library_path

N, K, COUNT = 4864, 896, 24


def sweep(call, rounds: int = 4) -> float:
    times = []
    for _ in range(rounds):
        for i in range(COUNT):
            t = time.perf_counter()
            call(i)
            times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 4]


def main() -> int:
    dense = SmallGemm(library_path(), global_symbols=False)
    quant = QuantGemm()
    quant.use_pool(dense.library)
    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((N, K)).astype(np.float32) for _ in range(COUNT)]
    quantized = {
        bits: [[np.array(a) for a in mx.quantize(mx.array(w), group_size=64, bits=bits)]
               for w in weights]
        for bits in (8, 4)
    }  # fmt: skip
    packed = {
        bits: [quant.matrix(*arrays, bits=bits, group=64) for arrays in quantized[bits]]
        for bits in (8, 4)
    }
    panels = [quant.matrix(*arrays, bits=4, group=64, panels=True) for arrays in quantized[4]]
    del quantized
    print(f"# {machine_description()}; {COUNT} matrices {N}x{K} in turn, cache-cold")
    for m in (1, 4, 8, 16):
        x = rng.standard_normal((m, K)).astype(np.float32)
        out = np.empty((m, N), np.float32)

        def float32(i: int, x=x, out=out, m=m) -> None:
            dense.multiply(x.ctypes.data, weights[i].ctypes.data, out.ctypes.data, m, N, K)

        t32 = sweep(float32)
        row = f"m={m:2}: float32 {t32 * 1e3:.2f} ms"
        for bits in (8, 4):
            for int8 in (True, False) if quant.int8_activations() else (False,):

                def quantized(i: int, x=x, bits=bits, int8=int8) -> None:
                    packed[bits][i].multiply(x, threads=2, int8=int8)

                t = sweep(quantized)
                label = f"{bits}-bit {'int8' if int8 else 'float'} x"
                row += f", {label} {t * 1e3:.3f} ms ({t32 / t:.2f}x)"
        if panels[0].panel:

            def in_panels(i: int, x=x) -> None:
                panels[i].multiply(x, threads=2)

            t = sweep(in_panels)
            row += f", 4-bit int8 x in panels {t * 1e3:.3f} ms ({t32 / t:.2f}x)"
        print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
