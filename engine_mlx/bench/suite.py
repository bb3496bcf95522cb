"""``bench --suite standard``: every mode and the baselines, per prompt category and depth.

One process, one target, interleaved: for each (category, depth) every cell runs once per
round, so the machine's drift hits all cells alike; ratios are taken within the same
(category, depth). The session keeps the prompt's prefill (``prompt_cache``) and so does the
mlx-lm baseline, so a cell's cost is its decoding, which is what is compared; prefill speed
is measured separately by ``bench`` without ``--suite``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine_mlx.arguments import config_from_args, parse_modes, resolve_model, speculators_from_args
from engine_mlx.backend import backend_info, live_device
from engine_mlx.bench.external import default_envs_dir, external_baselines
from engine_mlx.bench.llama_peer import plain_decoding, source_gguf
from engine_mlx.bench.llama_server import llama_cells
from engine_mlx.bench.measure import Runner, machine_description, run_ours, shown_path
from engine_mlx.bench.mlx_lm import mlx_lm_runner
from engine_mlx.bench.prompts import BenchPrompts
from engine_mlx.config import GenerationConfig
from engine_mlx.errors import EngineError
from engine_mlx.models.target import TargetModel
from engine_mlx.modes import Mode
from engine_mlx.session import Session


@dataclass(frozen=True)
class SuiteSpec:
    depths: tuple[int, ...]
    widths: tuple[int, ...]
    max_tokens: int
    repeats: int
    auto_width: int = 2


BASELINE_MODES = {
    "mlx-lm": "ar",
    "mlx-lm draft": "draft",
    "llama.cpp server": "ar",
    "llama.cpp dflash2": "dflash2",
}
"""Each baseline's mode (the others: z-lab's DFlash and its ports)."""

SUITES = {
    "standard": SuiteSpec(
        depths=(0, 1024, 2048, 4096, 8000), widths=(1, 2, 4, 8), max_tokens=64, repeats=1
    ),
    "reduced": SuiteSpec(depths=(0, 96), widths=(1, 2), max_tokens=8, repeats=1),
}


def run_suite(args: argparse.Namespace) -> int:
    spec = SUITES[args.suite]
    if args.widths:
        spec = replace(spec, widths=tuple(int(w) for w in args.widths.split(",")))
    if args.depths:
        spec = replace(spec, depths=tuple(int(d) for d in args.depths.split(",")))
    if args.repeats:
        spec = replace(spec, repeats=args.repeats)
    path = resolve_model(args.model)
    target = TargetModel.load(path)
    speculators = speculators_from_args(args, target)
    drafter, mtp, mtp_reason = speculators.drafter, speculators.mtp, speculators.mtp_reason
    session = Session(target, drafter, mtp, mtp_reason, reuse_prompt=True)
    if args.policy == "expected":  # before any cell is timed
        print(f"# step costs: {session.step_costs().note}", flush=True)
    base = replace(config_from_args(args), max_tokens=spec.max_tokens)
    cells: list[tuple[Mode, int]] = [(Mode.AR, 1)]
    cells += [(Mode.DFLASH2, w) for w in spec.widths] if drafter is not None else []
    cells += [(Mode.MTP, 1)] if mtp is not None else []
    cells += [(Mode.AUTO, spec.auto_width)]
    if isinstance(args.baseline_depths, str):
        args.baseline_depths = {int(d) for d in args.baseline_depths.split(",")}
    if args.modes:  # ar stays: it is every ratio's reference
        wanted = {*parse_modes(args.modes), Mode.AR}
        cells = [c for c in cells if c[0] in wanted]
    baselines: dict[str, Runner] = {}
    skipped: dict[str, str] = {}
    slow_mlx = target.quantized_layers > 0 and live_device() == "cpu"
    if not args.no_baseline:
        if slow_mlx:  # mlx-lm runs the model with MLX's own kernels
            skipped["mlx-lm"] = skipped["mlx-lm draft"] = (
                "MLX's own CPU kernel for quantized products is too slow to time at every "
                "depth (the 4-bit demo: 0.33 s a token on a 2-core Xeon)"
            )
        else:
            baselines["mlx-lm"] = mlx_lm_runner(path, target.dtype)
        if args.draft_lm and not slow_mlx:
            baselines["mlx-lm draft"] = mlx_lm_runner(path, target.dtype, args.draft_lm)
        elif not slow_mlx:
            skipped["mlx-lm draft"] = "no --draft-lm given"
        if drafter is not None:
            found, not_run = external_baselines(
                path,
                drafter.model,
                drafter.mask_id,
                drafter.block_size,
                args.bench_envs,
                target.dtype,
            )
            baselines |= found
            skipped |= not_run
    peer = None
    if not args.no_baseline:  # llama.cpp first, on an idle machine
        gguf = args.llama_gguf or source_gguf(path)
        envs = args.bench_envs or default_envs_dir()
        found = plain_decoding(gguf, envs, list(spec.depths), spec.max_tokens)
        if isinstance(found, str):
            skipped["llama.cpp"] = found
        else:
            peer = found
            print(f"# llama.cpp plain decoding ({found.gguf}, {found.threads} threads): "
                  + ", ".join(f"depth {d} {v:.2f} tok/s" for d, v in found.tok_s.items()),
                  flush=True)  # fmt: skip
    workdir = Path(tempfile.mkdtemp(prefix="flashchat-bench-"))
    if not args.no_baseline:
        context = min(target.spec.max_context, max(spec.depths) + spec.max_tokens + 1024)
        found_cells, not_run = llama_cells(
            args.bench_envs or default_envs_dir(),
            args.llama_gguf or source_gguf(path),
            speculators.drafter_path if drafter is not None else None,
            drafter.block_size if drafter is not None else 0,
            context,
            workdir,
        )
        baselines |= found_cells
        skipped |= not_run
    prompts = BenchPrompts(target, workdir)
    categories = args.categories.split(",") if args.categories else prompts.categories
    info = backend_info(target.dtype)
    print(f"# {machine_description()}; {info.describe()}; model {path.name}", flush=True)
    names = {
        "drafter": (
            shown_path(speculators.drafter_path)
            if drafter is not None and speculators.drafter_path is not None
            else None
        ),
        "mtp": speculators.mtp_source or mtp_reason,
    }
    rows: list[dict[str, Any]] = []
    for category in categories:
        for depth in spec.depths:
            prompt = prompts.prompt(category, depth)
            if len(prompt) + spec.max_tokens + 16 >= target.spec.max_context:
                raise EngineError(f"depth {depth} does not fit {target.spec.max_context} tokens")
            active = {
                name: runner
                for name, runner in baselines.items()
                if name.startswith(("mlx-lm", "llama.cpp"))
                or args.baseline_depths is None
                or depth in args.baseline_depths
            }
            rows += _measure(session, base, cells, active, prompt, spec)
            for r in rows[-(len(cells) + len(active)) :]:
                r.update(category=category, depth=depth, prompt_tokens=len(prompt))
                if peer is not None and depth in peer.tok_s:
                    r["vs_llama_cpp"] = r["decode_tps"] / peer.tok_s[depth]
                _print_row(r)
            if args.json_out:  # after every cell group: a long run interrupted keeps its rows
                report = _report(rows, spec, path, args, info, skipped, names)
                args.json_out.write_text(json.dumps(report, indent=2))
    report = _report(rows, spec, path, args, info, skipped, names)
    if peer is not None:
        report["llama_cpp"] = peer.as_dict()
        if args.json_out:
            args.json_out.write_text(json.dumps(report, indent=2))
    if args.plot_out:
        from engine_mlx.bench.plot import plot_suite  # matplotlib: an optional extra

        plot_suite(report, args.plot_out)
    return 0


def _measure(session, base: GenerationConfig, cells, baselines, prompt, spec) -> list[dict]:
    """Every cell once per round, ``spec.repeats`` rounds; the median run of each cell (the
    upper median of an even count: a run, not a mean, so its tau and steps go with it)."""
    runs: dict[tuple[str, str, int], list[dict]] = {}
    run_ours(session, prompt, replace(base, mode=Mode.AR, max_tokens=2))  # prefill, kept
    for name, runner in baselines.items():
        if name.startswith("mlx-lm"):  # in-process: this prefills the prompt it then keeps
            runner(prompt, 2)
    for _ in range(spec.repeats):
        for mode, width in cells:
            cfg = replace(base, mode=mode, width=width)
            runs.setdefault(("flashchat", mode, width), []).append(run_ours(session, prompt, cfg))
        for name, runner in baselines.items():
            runs.setdefault((name, BASELINE_MODES.get(name, "dflash"), 1), []).append(
                runner(prompt, spec.max_tokens)
            )
    ours = runs[("flashchat", Mode.AR, 1)][0]["output"]
    llama_plain = runs.get(("llama.cpp server", "ar", 1), [{"output": None}])[0]["output"]
    rows = []
    for (impl, mode, width), cell_runs in runs.items():
        reference = llama_plain if impl == "llama.cpp dflash2" else ours  # lossless: its own
        median = sorted(cell_runs, key=lambda r: r["decode_tps"])[len(cell_runs) // 2]
        rows.append(
            {
                "impl": impl,
                "mode": mode,
                "width": width,
                "decode_tps": median["decode_tps"],
                "tau": median.get("tau", float("nan")),
                "acceptance": median.get("acceptance", float("nan")),
                "modes": median.get("modes", {}),
                "identical_to_ar": all(r["output"] == reference for r in cell_runs),
                **{k: median[k] for k in ("step_ms", "draft_ms", "verify_ms") if k in median},
                **({"steps": [r["steps"] for r in cell_runs]} if median.get("steps") else {}),
            }
        )
    ar = rows[0]["decode_tps"] or 1.0
    own_plain = {r["impl"]: r["decode_tps"] for r in rows if r["mode"] == "ar"}
    own_plain["llama.cpp dflash2"] = own_plain.get("llama.cpp server", 0.0)
    for r in rows:
        r["vs_ar"] = r["decode_tps"] / ar
        if own_plain.get(r["impl"]):  # over the same engine's plain decoding
            r["vs_own_plain"] = r["decode_tps"] / own_plain[r["impl"]]
    return rows


def _print_row(r: dict[str, Any]) -> None:
    modes = ", ".join(f"{m} {n}" for m, n in r["modes"].items()) if r["mode"] == Mode.AUTO else ""
    tau = "" if r["tau"] != r["tau"] else f"{r['tau']:.2f}"
    print(
        f"{r['category']:<6} {r['depth']:>5} {r['impl']:<13} {r['mode']:<8} w{r['width']} "
        f"{r['decode_tps']:7.2f} tok/s  tau {tau:>5}  {r['vs_ar']:.2f}x ar  "
        + (f"{r['vs_llama_cpp']:.2f}x llama.cpp  " if "vs_llama_cpp" in r else "")
        + (f"{r['vs_own_plain']:.2f}x its plain  " if r["impl"].startswith("llama") else "")
        + f"{'same' if r['identical_to_ar'] else 'DIFFERENT'} {modes}",
        flush=True,
    )


def _report(rows, spec: SuiteSpec, path: Path, args, info, skipped, names) -> dict[str, Any]:
    return {
        "machine": machine_description(),
        "backend": info.describe(),
        "model": path.name,
        **names,
        "suite": args.suite,
        "depths": list(spec.depths),
        "max_tokens": spec.max_tokens,
        "repeats": spec.repeats,
        "baselines_not_run": skipped,
        "external_baseline_depths": sorted(args.baseline_depths) if args.baseline_depths else "all",
        "results": rows,
    }
