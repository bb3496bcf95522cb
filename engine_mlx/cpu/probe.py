"""Time one BLAS on the products the BLAS keeps: prefill-sized linear layers.

Run by ``choice`` as ``python -m engine_mlx.cpu.probe`` in a fresh process with
``FLASHCHAT_BLAS`` naming the library and the small-batch product off (a BLAS can only be
loaded before MLX, once per process). Prints one JSON object: median milliseconds per shape.
"""

from __future__ import annotations

import json
import time

import engine_mlx  # noqa: F401  (loads the BLAS named by FLASHCHAT_BLAS)
from engine_mlx.blas import status

# (rows, in, out): the demo models' prefill chunks through their linear layers, and one row
# (decoding) for machines where the small-batch product cannot be built.
PREFILL = ((512, 896, 4864), (512, 4864, 896), (512, 896, 896))
DECODE = ((1, 896, 4864), (1, 4864, 896), (1, 896, 896))
REPEATS = 5


def median_ms(rows: int, inputs: int, outputs: int) -> float:
    import mlx.core as mx

    x = mx.random.normal((rows, inputs))
    w = mx.random.normal((outputs, inputs))
    mx.eval(x, w)
    mx.eval(x @ w.T)  # warm-up: threads started, pages touched
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        mx.eval(x @ w.T)
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2] * 1e3


def main() -> None:
    loaded = status()
    result = {
        "library": loaded.library,
        "prefill_ms": sum(median_ms(*shape) for shape in PREFILL),
        "decode_ms": sum(median_ms(*shape) for shape in DECODE),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
