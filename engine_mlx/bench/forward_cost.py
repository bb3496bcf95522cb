"""``bench --forward-cost``: what one target forward costs by the tokens it carries and the
context depth it runs at.

A speculative step pays one forward over the whole candidate tree, so whether drafting can
pay at all comes down to how a forward over L tokens compares with one over a single token.
On a GPU that ratio stays near 1 for small L (reading the weights dominates); on a CPU it can
be far from it. These are the numbers the auto policy and the draft length depend on.

Where the small-batch product is loaded, each depth is also measured with the BLAS alone
(``blas_ms``), in the same process, right after: its before and after side by side.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine_mlx.arguments import resolve_model
from engine_mlx.auto.forward_timing import depth_prompt, prefill_cost, verify_costs
from engine_mlx.backend import backend_info
from engine_mlx.bench.measure import machine_description
from engine_mlx.blas import blas_only, small_gemm
from engine_mlx.errors import EngineError
from engine_mlx.models.target import TargetModel

TOKENS = (1, 2, 4, 8, 16, 32)
DEPTHS = (0, 1024, 4096)


def forward_cost_rows(
    target: TargetModel, depths: list[int], tokens: list[int], repeats: int
) -> list[dict[str, Any]]:
    rows = []
    for depth in depths:
        if depth + max(tokens) >= target.spec.max_context:
            raise EngineError(
                f"depth {depth} + {max(tokens)} tokens exceeds the model's context "
                f"({target.spec.max_context:,})"
            )
        prompt = depth_prompt(target, depth)
        costs = verify_costs(target, prompt, tokens, repeats)
        depth_rows = [{"depth": depth, "tokens": n, "ms": ms} for n, ms in costs.items()]
        if small_gemm() is not None:
            with blas_only():
                before = verify_costs(target, prompt, tokens, repeats)
            for row in depth_rows:
                row["blas_ms"] = before[row["tokens"]]
        rows += depth_rows
    return rows


def prefill_rows(target: TargetModel, depths: list[int], repeats: int) -> list[dict[str, Any]]:
    """The prefill of each depth's prompt, with the BLAS alone too where that differs."""
    rows = []
    for depth in (d for d in depths if d > 0):
        prompt = depth_prompt(target, depth)
        row: dict[str, Any] = {"depth": depth, "ms": prefill_cost(target, prompt, repeats)}
        if small_gemm() is not None:
            with blas_only():
                row["blas_ms"] = prefill_cost(target, prompt, repeats)
        rows.append(row)
    return rows


def run_forward_cost(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    target = TargetModel.load(path)
    depths = [int(d) for d in args.depths.split(",")] if args.depths else list(DEPTHS)
    info = backend_info(target.dtype)
    print(f"# {machine_description()}; {info.describe()}; model {path.name}", flush=True)
    rows = forward_cost_rows(target, depths, list(TOKENS), args.repeats)
    print(f"forward ms by tokens (x one token), median of {args.repeats}:")
    print(f"{'depth':>6} " + " ".join(f"{n:>14}" for n in TOKENS))
    for depth in depths:
        cells = {r["tokens"]: r["ms"] for r in rows if r["depth"] == depth}
        one = cells[1] or 1.0
        print(
            f"{depth:>6} " + " ".join(f"{cells[n]:>7.1f} ({cells[n] / one:.2f}x)" for n in TOKENS)
        )
        blas = {r["tokens"]: r["blas_ms"] for r in rows if r["depth"] == depth and "blas_ms" in r}
        if blas:
            first = blas[1] or 1.0
            print(
                f"{'BLAS':>6} "
                + " ".join(f"{blas[n]:>7.1f} ({blas[n] / first:.2f}x)" for n in TOKENS)
                + "   <- the BLAS alone, same depth"
            )
    prefill = prefill_rows(target, depths, args.repeats)
    for row in prefill:
        alone = f" (the BLAS alone: {row['blas_ms']:.0f} ms)" if "blas_ms" in row else ""
        print(f"prefill of {row['depth']} tokens: {row['ms']:.0f} ms{alone}")
    if args.json_out:
        report = {
            "model": path.name,
            "machine": machine_description(),
            "backend": info.describe(),
            "blas": info.blas,
            "dtype": info.compute_dtype,
            "repeats": args.repeats,
            "rows": rows,
            "prefill": prefill,
        }
        args.json_out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0
