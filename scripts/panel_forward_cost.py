"""A target forward's cost with its 4-bit weights in panels (cpu/quant_panels.c, the AVX2
build's layout) against MLX's row layout, side by side in one process.

    .venv/bin/python scripts/panel_forward_cost.py MODEL [--depth 0] [--rounds 4]

The model is loaded twice, once per layout (``quantized.PANELS``), and the two are timed in
alternating order round after round (``verify_costs``: one forward over 1-16 new tokens, the
median of three after a warm-up), so the machine's drift falls on both alike.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine_mlx.arguments import resolve_model
from engine_mlx.auto.forward_timing import depth_prompt, verify_costs
from engine_mlx.bench.measure import machine_description
from engine_mlx.models import quantized
from engine_mlx.models.target import TargetModel

SIZES = (1, 2, 4, 8, 16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--depth", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    path = resolve_model(args.model)
    targets = {}
    for panels in (True, False):
        quantized.PANELS = panels
        targets[panels] = TargetModel.load(path)
    in_panels = sum(
        bool(getattr(getattr(m, "_matrix", None), "panel", 0))
        for _, m in targets[True].model.named_modules()
    )
    if not in_panels:
        print("no matrix of this model is in panels on this build: nothing to compare")
        return 1
    prompt = depth_prompt(targets[True], args.depth)
    times: dict[bool, dict[int, list[float]]] = {p: {n: [] for n in SIZES} for p in targets}
    for round_ in range(args.rounds):
        for panels in (True, False) if round_ % 2 == 0 else (False, True):
            for n, ms in verify_costs(targets[panels], prompt, list(SIZES), 3).items():
                times[panels][n].append(ms)
    print(f"# {machine_description()}; {Path(path).name}, depth {args.depth}, "
          f"{in_panels} matrices in panels; medians of {args.rounds} rounds")  # fmt: skip
    print(f"{'tokens':>6} {'panels ms':>10} {'rows ms':>10} {'rows / panels':>14}")
    for n in SIZES:
        a, b = (statistics.median(times[p][n]) for p in (True, False))
        print(f"{n:>6} {a:>10.1f} {b:>10.1f} {b / a:>13.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
