"""``bench --sampler-cost``: the sampler alone, per row and per verification of several rows.

Sampled decoding pays the sampler on every step: plain decoding one row, a verification one row
per tree node. Timed here without a model, on logits already evaluated (as the CPU's forward
leaves them), for each setting the app offers and two vocabulary sizes (Qwen's 151,936, a
49,152-token one), so a change to the sampler is judged on its own. Two costs per cell: ``sample``
(a token per row: what plain decoding and verification pay) and ``logprobs`` (the filtered
distribution over the whole vocabulary: what the exact tests and the device's acceptance read).
Then where a sampled token's time goes at the defaults, stage by stage (``sampler_stages``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import mlx.core as mx

from engine_mlx.backend import backend_info
from engine_mlx.bench.measure import machine_description
from engine_mlx.bench.sampler_stages import CONTEXT, inputs, stage_costs
from engine_mlx.decoding.sampling import SamplingParams

VOCABS = (151_936, 49_152)
ROWS = (1, 4, 8, 16)
BUDGET_S = 0.4  # per cell: repeats stop early past this, after at least MIN_REPEATS
MIN_REPEATS = 3
SETTINGS: dict[str, SamplingParams] = {
    "greedy": SamplingParams(),
    "temperature": SamplingParams(0.7),
    "top-k": SamplingParams(0.7, top_k=20),
    "top-p": SamplingParams(0.7, top_p=0.8),
    "min-p": SamplingParams(0.7, min_p=0.05),
    "penalty": SamplingParams(0.7, repetition_penalty=1.05),
    "defaults": SamplingParams(0.7, top_k=20, top_p=0.8, repetition_penalty=1.05),
}


def _time(run: Callable[[], Any], repeats: int) -> float:
    """Median milliseconds of ``run`` (evaluated), after a warm-up."""
    mx.eval(run())
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < repeats and (
        len(times) < MIN_REPEATS or time.perf_counter() - start < BUDGET_S
    ):
        t = time.perf_counter()
        mx.eval(run())
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


def cell(params: SamplingParams, vocab: int, rows: int, repeats: int) -> dict[str, Any]:
    data = inputs(vocab, rows)
    sampler = data.sampler(params)
    return {
        "vocab": vocab,
        "rows": rows,
        "sample_ms": _time(lambda: sampler.sample(data.logits, data.extra), repeats),
        "logprobs_ms": _time(lambda: sampler.logprobs(data.logits, data.extra), repeats),
    }


def sampler_cost_cells(
    vocabs: tuple[int, ...], rows: tuple[int, ...], repeats: int
) -> list[dict[str, Any]]:
    cells = []
    for vocab in vocabs:
        for name, params in SETTINGS.items():
            for n in rows:
                cells.append({"setting": name, **cell(params, vocab, n, repeats)})
    return cells


def stage_rows(vocabs: tuple[int, ...], rows: tuple[int, ...], repeats: int) -> list[dict]:
    return [
        {"vocab": vocab, "rows": n, "stage": stage, "ms": ms}
        for vocab in vocabs
        for n in rows
        for stage, ms in stage_costs(vocab, n, repeats)
    ]


def _table(cells: list[dict], vocab: int, rows: tuple[int, ...], key: str) -> list[str]:
    at = {(c["setting"], c["rows"]): c[key] for c in cells if c["vocab"] == vocab}
    head = f"{'':>14} " + " ".join(f"{n:>4} rows" for n in rows)
    eight = 8 in rows and 1 in rows
    lines = [head + ("   8 rows / 1" if eight else "")]
    for name in SETTINGS:
        line = f"{name:>14} " + " ".join(f"{at[name, n]:>9.3f}" for n in rows)
        if eight:
            line += f"   {at[name, 8] / max(at[name, 1], 1e-9):>8.2f}x"
        lines.append(line)
    return lines


def _split(stages: list[dict], vocab: int, rows: tuple[int, ...]) -> list[str]:
    at = {(s["stage"], s["rows"]): s["ms"] for s in stages if s["vocab"] == vocab}
    names = list(dict.fromkeys(s["stage"] for s in stages if s["vocab"] == vocab))
    lines = [f"{'':>30} " + " ".join(f"{n:>4} rows" for n in rows)]
    for name in names:
        lines.append(f"{name:>30} " + " ".join(f"{at[name, n]:>9.3f}" for n in rows))
    return lines


def report_lines(
    cells: list[dict], stages: list[dict], vocabs: tuple[int, ...], rows: tuple[int, ...]
) -> list[str]:
    lines = []
    for vocab in vocabs:
        lines.append(f"vocab {vocab:,}: sample ms (a token per row), median")
        lines += _table(cells, vocab, rows, "sample_ms")
        lines.append(f"vocab {vocab:,}: logprobs ms (the distribution over the vocabulary)")
        lines += _table(cells, vocab, rows, "logprobs_ms")
        lines.append(f"vocab {vocab:,}: where a sampled token's time goes at the defaults (ms)")
        lines += _split(stages, vocab, rows)
    return lines


def run_sampler_cost(args: argparse.Namespace) -> int:
    repeats = args.repeats or 100
    info = backend_info(mx.float32)
    print(f"# {machine_description()}; {info.describe()}", flush=True)
    cells = sampler_cost_cells(VOCABS, ROWS, repeats)
    stages = stage_rows(VOCABS, ROWS, repeats)
    print("\n".join(report_lines(cells, stages, VOCABS, ROWS)))
    if args.json_out:
        report = {
            "machine": machine_description(),
            "backend": info.describe(),
            "context_tokens": CONTEXT,
            "settings": {name: asdict(p) for name, p in SETTINGS.items()},
            "cells": cells,
            "stages": stages,
        }
        args.json_out.write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 0
