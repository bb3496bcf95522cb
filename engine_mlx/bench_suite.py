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
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import mlx.core as mx

from engine_mlx.backend import backend_info
from engine_mlx.bench import machine_description, run_ours
from engine_mlx.bench_prompts import BenchPrompts
from engine_mlx.errors import EngineError
from engine_mlx.models.target import TargetModel
from engine_mlx.session import GenerationConfig, Session


@dataclass(frozen=True)
class SuiteSpec:
    depths: tuple[int, ...]
    widths: tuple[int, ...]
    max_tokens: int
    repeats: int
    auto_width: int = 2


SUITES = {
    "standard": SuiteSpec(
        depths=(0, 1024, 2048, 4096, 8000), widths=(1, 2, 4, 8), max_tokens=64, repeats=1
    ),
    "reduced": SuiteSpec(depths=(0, 96), widths=(1, 2), max_tokens=8, repeats=1),
}

Runner = Callable[[list[int], int], dict[str, Any]]


def mlx_lm_runner(path: Path, dtype: mx.Dtype, draft: Path | None = None) -> Runner:
    """mlx-lm's ``stream_generate`` (with ``draft_model`` when given: its own speculative
    loop), reusing the prompt's prefill across runs like our session does."""
    from mlx_lm import load, stream_generate
    from mlx_lm.models.cache import make_prompt_cache

    model, tokenizer = load(str(path))
    model.set_dtype(dtype)
    tokenizer.eos_token_ids = set()  # always max_tokens, like ignore_eos
    draft_model = None
    if draft is not None:
        draft_model, _ = load(str(draft))
        draft_model.set_dtype(dtype)
    kept: dict[tuple[int, ...], list[Any]] = {}

    def prefilled(prompt: list[int]) -> list[Any]:
        key = tuple(prompt[:-1])
        if key not in kept:
            cache = make_prompt_cache(model)
            if draft_model is not None:
                cache += make_prompt_cache(draft_model)
            kept.clear()
            for start in range(0, len(key), 512):
                chunk = mx.array(key[start : start + 512])[None]
                model(chunk, cache=cache[: len(model.layers)])
                if draft_model is not None:
                    draft_model(chunk, cache=cache[len(model.layers) :])
                mx.eval([c.state for c in cache])
            kept[key] = [(type(c), c.state) for c in cache]
        return [cls.from_state(state) for cls, state in kept[key]]

    def run(prompt: list[int], max_tokens: int) -> dict[str, Any]:
        cache = prefilled(prompt)
        kwargs = {"draft_model": draft_model} if draft_model is not None else {}
        out, drafted = [], 0
        start = time.perf_counter()
        first = last = None
        for r in stream_generate(
            model,
            tokenizer,
            mx.array(prompt[-1:]),
            max_tokens=max_tokens,
            prompt_cache=cache,
            **kwargs,
        ):
            last = time.perf_counter()
            first = first or last
            out.append(r.token)
            drafted += bool(getattr(r, "from_draft", False))
        decode = (len(out) - 1) / (last - first) if len(out) > 1 and last > first else 0.0
        steps = len(out) - drafted  # each verify ends with one token of the target's own
        return {
            "decode_tps": decode,
            "ttft_s": first - start,
            "tokens": len(out),
            "tau": len(out) / max(1, steps),
            "output": out,
        }

    return run


def run_suite(args: argparse.Namespace) -> int:
    from engine_mlx.cli import config_from_args, resolve_model, speculators_from_args

    spec = SUITES[args.suite]
    if args.widths:
        spec = replace(spec, widths=tuple(int(w) for w in args.widths.split(",")))
    if args.depths:
        spec = replace(spec, depths=tuple(int(d) for d in args.depths.split(",")))
    path = resolve_model(args.model)
    target = TargetModel.load(path)
    speculators = speculators_from_args(args, target)
    drafter, mtp, mtp_reason = speculators.drafter, speculators.mtp, speculators.mtp_reason
    session = Session(target, drafter, mtp, mtp_reason, reuse_prompt=True)
    base = replace(config_from_args(args), max_tokens=spec.max_tokens)
    cells: list[tuple[str, int]] = [("ar", 1)]
    cells += [("dflash2", w) for w in spec.widths] if drafter is not None else []
    cells += [("mtp", 1)] if mtp is not None else []
    cells += [("auto", spec.auto_width)]
    if isinstance(args.baseline_depths, str):
        args.baseline_depths = {int(d) for d in args.baseline_depths.split(",")}
    if args.modes:  # ar stays: it is every ratio's reference
        wanted = {m.strip() for m in args.modes.split(",")} | {"ar"}
        cells = [c for c in cells if c[0] in wanted]
    baselines: dict[str, Runner] = {}
    skipped: dict[str, str] = {}
    if not args.no_baseline:
        baselines["mlx-lm"] = mlx_lm_runner(path, target.dtype)
        if args.draft_lm:
            baselines["mlx-lm draft"] = mlx_lm_runner(path, target.dtype, args.draft_lm)
        else:
            skipped["mlx-lm draft"] = "no --draft-lm given"
        if drafter is not None:
            from engine_mlx.bench_zlab import make_zlab_runner, zlab_available

            if zlab_available():
                baselines["z-lab"] = make_zlab_runner(
                    path, drafter.model, drafter.mask_id, target.dtype, drafter.block_size
                )
            else:
                skipped["z-lab"] = "package dflash not importable in this environment"
            from engine_mlx.bench_external import external_baselines, merge_baselines

            dtype = target.dtype
            found, not_run = external_baselines(
                path, drafter.model, drafter.mask_id, drafter.block_size, args.bench_envs, dtype
            )
            merge_baselines(baselines, skipped, found, not_run)
    prompts = BenchPrompts(target, Path(tempfile.mkdtemp(prefix="flashchat-bench-")))
    categories = args.categories.split(",") if args.categories else prompts.categories
    info = backend_info(target.dtype)
    print(f"# {machine_description()}; {info.describe()}; model {path.name}", flush=True)
    names = {
        "drafter": _shown(speculators.drafter_path) if drafter is not None else None,
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
                if name.startswith("mlx-lm")
                or args.baseline_depths is None
                or depth in args.baseline_depths
            }
            rows += _measure(session, base, cells, active, prompt, spec)
            for r in rows[-(len(cells) + len(active)) :]:
                r.update(category=category, depth=depth, prompt_tokens=len(prompt))
                _print_row(r)
            if args.json_out:  # after every cell group: a long run interrupted keeps its rows
                report = _report(rows, spec, path, args, info, skipped, names)
                args.json_out.write_text(json.dumps(report, indent=2))
    report = _report(rows, spec, path, args, info, skipped, names)
    if args.plot_out:
        from engine_mlx.bench_plot import plot_suite

        plot_suite(report, args.plot_out)
    return 0


def _shown(path: Path | None) -> str | None:
    """A path as the report shows it: relative to the working folder when inside it, so a
    committed report names no folder of the machine that made it."""
    if path is None:
        return None
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return Path(path).name


def _measure(session, base: GenerationConfig, cells, baselines, prompt, spec) -> list[dict]:
    """Every cell once per round, ``spec.repeats`` rounds; the median run of each cell."""
    runs: dict[tuple[str, str, int], list[dict]] = {}
    run_ours(session, prompt, replace(base, mode="ar", max_tokens=2))  # prefill, kept
    for name, runner in baselines.items():
        if name.startswith("mlx-lm"):  # in-process: this prefills the prompt it then keeps
            runner(prompt, 2)
    for _ in range(spec.repeats):
        for mode, width in cells:
            cfg = replace(base, mode=mode, width=width)
            runs.setdefault(("flashchat", mode, width), []).append(run_ours(session, prompt, cfg))
        for name, runner in baselines.items():
            mode = "draft" if name.endswith("draft") else "ar" if name == "mlx-lm" else "dflash"
            runs.setdefault((name, mode, 1), []).append(runner(prompt, spec.max_tokens))
    reference = runs[("flashchat", "ar", 1)][0]["output"]
    rows = []
    for (impl, mode, width), cell_runs in runs.items():
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
            }
        )
    ar = rows[0]["decode_tps"] or 1.0
    for r in rows:
        r["vs_ar"] = r["decode_tps"] / ar
    return rows


def _print_row(r: dict[str, Any]) -> None:
    modes = ", ".join(f"{m} {n}" for m, n in r["modes"].items()) if r["mode"] == "auto" else ""
    tau = "" if r["tau"] != r["tau"] else f"{r['tau']:.2f}"
    print(
        f"{r['category']:<6} {r['depth']:>5} {r['impl']:<13} {r['mode']:<8} w{r['width']} "
        f"{r['decode_tps']:7.2f} tok/s  tau {tau:>5}  {r['vs_ar']:.2f}x ar  "
        f"{'same' if r['identical_to_ar'] else 'DIFFERENT'} {modes}",
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
