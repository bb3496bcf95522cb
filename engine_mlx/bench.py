"""``python -m engine_mlx bench``: our decoding beside mlx-lm's, in one process, interleaved.

These machines are noisy, so each cell alternates ours and the baseline run by run and reports
medians and the ratio of medians; the machine, backend and dtype are written with the numbers.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx

from engine_mlx.backend import backend_info
from engine_mlx.errors import EngineError
from engine_mlx.events import Finished
from engine_mlx.models.target import TargetModel
from engine_mlx.session import MODES, GenerationConfig, Session

FILLER = (
    "The history of computing is a story of abstractions layered on one another, from "
    "switches and gates to instruction sets, compilers, operating systems and networks. "
)


def context_prompt(target: TargetModel, depth: int) -> list[int]:
    """``depth`` tokens of deterministic prose (at least a short question)."""
    question = target.tokenizer.encode("Summarise the text above in one paragraph.")
    if depth <= len(question):
        return question
    filler = target.tokenizer.encode(FILLER * (depth // 8 + 4))
    return filler[: depth - len(question)] + question


def machine_description() -> str:
    import os

    cores = os.cpu_count()
    py = platform.python_version()
    return f"{platform.system()} {platform.machine()}, {cores} cores, Python {py}"


def run_ours(session: Session, prompt: list[int], mode: str, max_tokens: int) -> dict[str, float]:
    config = GenerationConfig(max_tokens=max_tokens, mode=mode, ignore_eos=True)
    finished = None
    for event in session.generate(prompt, config):
        if isinstance(event, Finished):
            finished = event
    if finished is None:
        raise EngineError(f"bench: mode {mode} produced no result")
    s = finished.stats
    return {
        "prefill_tps": s.prefill_tps,
        "ttft_s": s.ttft_s,
        "decode_tps": s.decode_tps,
        "tau": s.tau,
        "tokens": s.generated_tokens,
    }


def make_baseline(path: Path, dtype: mx.Dtype) -> Callable[[list[int], int], dict[str, float]]:
    """mlx-lm's own ``stream_generate`` on the same folder and compute dtype."""
    from mlx_lm import load, stream_generate

    model, tokenizer = load(str(path))
    model.set_dtype(dtype)
    tokenizer.eos_token_ids = set()  # like ignore_eos: always max_tokens

    def run(prompt: list[int], max_tokens: int) -> dict[str, float]:
        start = time.perf_counter()
        first = last = None
        count = 0
        for _ in stream_generate(model, tokenizer, mx.array(prompt), max_tokens=max_tokens):
            last = time.perf_counter()
            first = first or last
            count += 1
        ttft = first - start
        return {
            "prefill_tps": len(prompt) / ttft,
            "ttft_s": ttft,
            "decode_tps": (count - 1) / (last - first) if count > 1 else 0.0,
            "tau": 1.0,
            "tokens": count,
        }

    return run


def _median(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def run_bench(args: argparse.Namespace) -> int:
    from engine_mlx.cli import resolve_model

    path = resolve_model(args.model)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise EngineError(f"unknown mode(s) {unknown}; available: {', '.join(MODES)}")
    depths = [int(d) for d in args.depths.split(",") if d.strip()]
    target = TargetModel.load(path)
    session = Session(target)
    baseline = None if args.no_baseline else make_baseline(path, target.dtype)
    info = backend_info(target.dtype)
    print(f"# {machine_description()}; {info.describe()}; model {path.name}")
    rows: list[dict[str, Any]] = []
    for depth in depths:
        prompt = context_prompt(target, depth)
        if len(prompt) + args.max_tokens >= target.spec.max_context:
            raise EngineError(f"depth {depth} + {args.max_tokens} tokens exceeds the context")
        # warm-up (compiles, allocates) outside the measurement
        run_ours(session, prompt[:16], modes[0], 4)
        if baseline:
            baseline(prompt[:16], 4)
        for mode in modes:
            ours_runs, base_runs = [], []
            for _ in range(args.repeats):
                ours_runs.append(run_ours(session, prompt, mode, args.max_tokens))
                if baseline and mode == "ar":
                    base_runs.append(baseline(prompt, args.max_tokens))
            rows.append({"impl": "flashchat", "mode": mode, "depth": depth, **_median(ours_runs)})
            if base_runs:
                rows.append({"impl": "mlx-lm", "mode": "ar", "depth": depth, **_median(base_runs)})
    ratios = _ratios(rows)
    _print_table(rows, ratios)
    if args.json_out:
        report = {
            "machine": machine_description(),
            "backend": info.describe(),
            "dtype": info.compute_dtype,
            "openblas": info.openblas,
            "model": path.name,
            "max_tokens": args.max_tokens,
            "repeats": args.repeats,
            "results": rows,
            "ratios": ratios,
        }
        args.json_out.write_text(json.dumps(report, indent=2))
    return 0


def _ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    base = {r["depth"]: r for r in rows if r["impl"] == "mlx-lm"}
    out = []
    for r in rows:
        b = base.get(r["depth"])
        if r["impl"] == "flashchat" and b:
            out.append(
                {
                    "mode": r["mode"],
                    "depth": r["depth"],
                    "decode_ratio": r["decode_tps"] / b["decode_tps"],
                    "prefill_ratio": r["prefill_tps"] / b["prefill_tps"],
                }
            )
    return out


def _print_table(rows: list[dict[str, Any]], ratios: list[dict[str, Any]]) -> None:
    ratio = {(r["mode"], r["depth"]): r["decode_ratio"] for r in ratios}
    print(
        f"{'impl':<10} {'mode':<8} {'depth':>6} {'prefill tok/s':>14} {'TTFT ms':>8} "
        f"{'decode tok/s':>13} {'tau':>5} {'vs mlx-lm':>10}"
    )
    for r in rows:
        vs = ratio.get((r["mode"], r["depth"])) if r["impl"] == "flashchat" else None
        print(
            f"{r['impl']:<10} {r['mode']:<8} {r['depth']:>6} {r['prefill_tps']:>14.1f} "
            f"{r['ttft_s'] * 1000:>8.0f} {r['decode_tps']:>13.2f} {r['tau']:>5.2f} "
            f"{(f'{vs:.2f}x' if vs else ''):>10}"
        )
