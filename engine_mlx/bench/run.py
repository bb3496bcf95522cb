"""``python -m engine_mlx bench``: our decoding beside mlx-lm's, in one process, interleaved.

These machines are noisy, so each cell alternates ours and the baseline run by run and reports
medians and the ratio of medians; the machine, backend and dtype are written with the numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from math import nan
from typing import Any

from engine_mlx.arguments import config_from_args, parse_modes, resolve_model, speculators_from_args
from engine_mlx.auto.forward_timing import verify_costs
from engine_mlx.backend import backend_info
from engine_mlx.bench.external import external_baselines
from engine_mlx.bench.measure import context_prompt, machine_description, run_ours
from engine_mlx.bench.mlx_lm import mlx_lm_runner
from engine_mlx.bench.plot import calibration_points, plot_calibration
from engine_mlx.errors import EngineError
from engine_mlx.models.target import TargetModel
from engine_mlx.modes import Mode
from engine_mlx.session import Session


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        k: statistics.median(r[k] for r in runs)
        for k in runs[0]
        if k not in ("output", "modes", "steps")
    }
    if "modes" in runs[0]:
        out["modes"] = runs[-1]["modes"]  # steps per mode (auto: what it chose)
    if runs[0].get("steps"):
        out["steps"] = [r["steps"] for r in runs]  # auto: every step of every run
    return out


def run_bench(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    modes = parse_modes(args.modes or Mode.AR)
    widths = [int(w) for w in (args.widths or "1").split(",") if w.strip()]
    depths = [int(d) for d in (args.depths or "0,1024").split(",") if d.strip()]
    target = TargetModel.load(path)
    speculators = speculators_from_args(args, target)
    drafter, mtp, mtp_reason = speculators.drafter, speculators.mtp, speculators.mtp_reason
    if Mode.DFLASH2 in modes and drafter is None:
        raise EngineError("mode dflash2 needs --drafter DIR (init-drafter makes a random one)")
    if Mode.MTP in modes and mtp is None:
        raise EngineError(f"mode mtp: {mtp_reason}")
    session = Session(target, drafter, mtp, mtp_reason)
    if Mode.AUTO in modes and args.policy == "expected":  # before any cell is timed
        print(f"# step costs: {session.step_costs().note}", flush=True)
    baseline = None if args.no_baseline else mlx_lm_runner(path, target.dtype, keep_prefill=False)
    zlab = None
    if Mode.DFLASH2 in modes and drafter is not None and not args.no_baseline:
        block = args.block or drafter.block_size
        found, not_run = external_baselines(
            path, drafter.model, drafter.mask_id, block, args.bench_envs, target.dtype, ("z-lab",)
        )
        zlab = found.get("z-lab")
        for name, reason in not_run.items():
            print(f"# {name} not run: {reason}")
    info = backend_info(target.dtype)
    print(f"# {machine_description()}; {info.describe()}; model {path.name}")
    cells = [(m, w) for m in modes for w in (widths if m not in (Mode.AR, Mode.MTP) else [1])]
    base = config_from_args(args)
    block = args.block or (drafter.block_size if drafter else 8)
    rows: list[dict[str, Any]] = []
    tree_costs: dict[int, dict[int, float]] = {}
    for depth in depths:
        prompt = context_prompt(target, depth)
        if len(prompt) + args.max_tokens + block >= target.spec.max_context:
            raise EngineError(f"depth {depth} + {args.max_tokens} tokens exceeds the context")
        run_ours(session, prompt[:16], replace(base, mode=Mode.AR, max_tokens=4))  # warm-up
        if baseline:
            baseline(prompt[:16], 4)
        if zlab:
            zlab(prompt[:16], 4)
        runs: dict[tuple[str, int], list[dict[str, Any]]] = {c: [] for c in cells}
        base_runs, zlab_runs = [], []
        for _ in range(args.repeats):  # interleaved: every cell once per round
            for mode, width in cells:
                runs[(mode, width)].append(
                    run_ours(session, prompt, replace(base, mode=mode, width=width))
                )
            if baseline:
                base_runs.append(baseline(prompt, args.max_tokens))
            if zlab:
                zlab_runs.append(zlab(prompt, args.max_tokens))
        reference = runs[cells[0]][0]["output"]
        for (mode, width), cell_runs in runs.items():
            row = {
                "impl": "flashchat",
                "mode": mode,
                "width": width,
                "depth": depth,
                **_median(cell_runs),
            }
            row["identical_to_first"] = all(r["output"] == reference for r in cell_runs)
            rows.append(row)
        if base_runs:
            rows.append(
                {
                    "impl": "mlx-lm",
                    "mode": Mode.AR,
                    "width": 1,
                    "depth": depth,
                    **_median(base_runs),
                }
            )
        if zlab_runs:
            row = {"impl": "z-lab", "mode": Mode.DFLASH2, "width": 1, "depth": depth}
            row |= _median(zlab_runs)
            row["identical_to_first"] = all(r["output"] == reference for r in zlab_runs)
            rows.append(row)
        sizes = sorted({1, *(w * (block - 1) + 1 for w in widths)})
        tree_costs[depth] = verify_costs(target, prompt, sizes)
    ratios = _ratios(rows)
    _print_table(rows, ratios)
    _print_auto_choices(rows)
    _print_tree_costs(tree_costs)
    if args.json_out:
        report = {
            "machine": machine_description(),
            "backend": info.describe(),
            "dtype": info.compute_dtype,
            "blas": info.blas,
            "model": path.name,
            "drafter": str(args.drafter) if args.drafter else None,
            "block_size": block,
            "max_tokens": args.max_tokens,
            "repeats": args.repeats,
            "results": rows,
            "ratios": ratios,
            "verify_ms_by_tree_size": {str(d): c for d, c in tree_costs.items()},
        }
        args.json_out.write_text(json.dumps(report, indent=2))
    points = calibration_points({"results": rows})
    if points:
        predicted = sum(p for p, _ in points) / len(points)
        realised = sum(r for _, r in points) / len(points)
        print(
            f"auto's drafted steps: predicted {predicted:.2f} tokens/step, committed "
            f"{realised:.2f} ({len(points)} steps)"
        )
        if args.plot_out:
            print(f"calibration plot: {plot_calibration({'results': rows}, args.plot_out)}")
    return 0


def _ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Decode and prefill speed over mlx-lm's plain decoding at the same depth, and decode
    speed over our own plain decoding."""
    base = {r["depth"]: r for r in rows if r["impl"] == "mlx-lm"}
    zlab = {r["depth"]: r for r in rows if r["impl"] == "z-lab"}
    ours_ar = {r["depth"]: r for r in rows if r["impl"] == "flashchat" and r["mode"] == Mode.AR}
    out = []
    for r in rows:
        if r["impl"] != "flashchat":
            continue
        entry = {"mode": r["mode"], "width": r["width"], "depth": r["depth"]}
        if r["depth"] in base:
            b = base[r["depth"]]
            entry["decode_vs_mlx_lm"] = r["decode_tps"] / b["decode_tps"]
            entry["prefill_vs_mlx_lm"] = r["prefill_tps"] / b["prefill_tps"]
        if r["depth"] in ours_ar:
            entry["decode_vs_ar"] = r["decode_tps"] / ours_ar[r["depth"]]["decode_tps"]
        if r["mode"] == Mode.DFLASH2 and r["depth"] in zlab:
            entry["decode_vs_zlab"] = r["decode_tps"] / zlab[r["depth"]]["decode_tps"]
        out.append(entry)
    return out


def _print_table(rows: list[dict[str, Any]], ratios: list[dict[str, Any]]) -> None:
    ratio = {(r["mode"], r["width"], r["depth"]): r for r in ratios}
    print(
        f"{'impl':<9} {'mode':<8} {'w':>2} {'depth':>6} {'prefill/s':>9} {'TTFT ms':>8} "
        f"{'tok/s':>7} {'tau':>5} {'acc':>5} {'draft':>6} {'verify':>7} {'commit':>6} "
        f"{'vs ar':>6} {'vs mlx-lm':>9} {'vs z-lab':>8} {'same':>4}"
    )
    for r in rows:
        x = ratio.get((r["mode"], r["width"], r["depth"]), {}) if r["impl"] == "flashchat" else {}
        vs_ar = f"{x['decode_vs_ar']:.2f}x" if "decode_vs_ar" in x else ""
        vs_lm = f"{x['decode_vs_mlx_lm']:.2f}x" if "decode_vs_mlx_lm" in x else ""
        vs_zl = f"{x['decode_vs_zlab']:.2f}x" if "decode_vs_zlab" in x else ""
        same = {True: "yes", False: "NO"}.get(r.get("identical_to_first"), "")
        acc = r.get("acceptance", nan)
        print(
            f"{r['impl']:<9} {r['mode']:<8} {r['width']:>2} {r['depth']:>6} "
            f"{r.get('prefill_tps', nan):>9.1f} {r.get('ttft_s', nan) * 1000:>8.0f} "
            f"{r['decode_tps']:>7.2f} "
            f"{r['tau']:>5.2f} {'' if acc != acc else f'{acc:.0%}':>5} "
            f"{r.get('draft_ms', 0):>6.1f} {r.get('verify_ms', 0):>7.1f} "
            f"{r.get('commit_ms', 0):>6.1f} {vs_ar:>6} {vs_lm:>9} {vs_zl:>8} {same:>4}"
        )


def _print_auto_choices(rows: list[dict[str, Any]]) -> None:
    for r in rows:
        if r["impl"] == "flashchat" and r["mode"] == Mode.AUTO and r.get("modes"):
            steps = ", ".join(f"{m} {n} steps" for m, n in r["modes"].items())
            print(f"auto at depth {r['depth']} (width {r['width']}): {steps}")


def _print_tree_costs(costs: dict[int, dict[int, float]]) -> None:
    print("verify forward, ms by tree size (nodes), relative to 1 token:")
    for depth, by_size in costs.items():
        one = by_size.get(1) or 1.0
        cells = "  ".join(f"{n}: {ms:.0f} ({ms / one:.2f}x)" for n, ms in by_size.items())
        print(f"  depth {depth}: {cells}")
