"""What both benchmarks measure the same way: our engine's runs, the machine, the prompts of a
given depth, and the cost of one verify forward by tree size."""

from __future__ import annotations

import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import mlx.core as mx

from engine_mlx.config import GenerationConfig
from engine_mlx.cpu.machine import cores, cpu_model
from engine_mlx.errors import EngineError
from engine_mlx.events import Error, Finished, Tokens
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session

PREFILL_CHUNK = 512
Runner = Callable[[list[int], int], dict[str, Any]]  # (prompt ids, max tokens) -> measurements

FILLER = (
    "The history of computing is a story of abstractions layered on one another, from "
    "switches and gates to instruction sets, compilers, operating systems and networks. "
)


def depth_prompt(target: TargetModel, depth: int) -> list[int]:
    """Exactly ``depth`` tokens of deterministic prose (none at depth 0)."""
    if depth <= 0:
        return []
    return target.tokenizer.encode(FILLER * (depth // 8 + 4))[:depth]


def context_prompt(target: TargetModel, depth: int) -> list[int]:
    """``depth`` tokens of deterministic prose ending in a question (at least the question)."""
    question = target.tokenizer.encode("Summarise the text above in one paragraph.")
    if depth <= len(question):
        return question
    return depth_prompt(target, depth - len(question)) + question


def machine_description() -> str:
    py = platform.python_version()
    return f"{cpu_model()}, {platform.system()} {platform.machine()}, {cores()} cores, Python {py}"


def run_ours(session: Session, prompt: list[int], config: GenerationConfig) -> dict[str, Any]:
    """One generation, measured; always ``config.max_tokens`` tokens (EOS ignored)."""
    config = replace(config, ignore_eos=True)
    finished, steps = None, []
    for event in session.generate(prompt, config):
        if isinstance(event, Tokens):
            steps.append(event.step)
        elif isinstance(event, Finished):
            finished = event
        elif isinstance(event, Error):
            raise EngineError(event.message)
    if finished is None:
        raise EngineError(f"bench: mode {config.mode} produced no result")
    s = finished.stats
    spec_steps = steps[1:] or steps  # the first step is the prefill's token
    n = len(spec_steps)
    return {
        "prefill_tps": s.prefill_tps,
        "ttft_s": s.ttft_s,
        "decode_tps": s.decode_tps,
        "tau": s.tau,
        "acceptance": s.acceptance_rate if s.acceptance_rate is not None else float("nan"),
        "tokens": s.generated_tokens,
        "draft_ms": 1000 * sum(x.draft_s for x in spec_steps) / n,
        "verify_ms": 1000 * sum(x.verify_s for x in spec_steps) / n,
        "commit_ms": 1000 * sum(x.commit_s for x in spec_steps) / n,
        "step_ms": 1000 * sum(x.seconds for x in spec_steps) / n,
        "output": list(finished.tokens),
        "modes": dict(s.modes),
    }


def prefill_cost(target: TargetModel, prompt: list[int], repeats: int = 3) -> float:
    """ms to prefill ``prompt`` into a fresh cache in the engine's chunks: median of
    ``repeats`` after one untimed run."""
    times = []
    for attempt in range(repeats + 1):
        cache = target.make_cache()
        t0 = time.perf_counter()
        for start in range(0, len(prompt), PREFILL_CHUNK):
            chunk = mx.array(prompt[start : start + PREFILL_CHUNK])
            mx.eval(target.forward(chunk, cache, last_only=True).logits)
        if attempt:
            times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def verify_costs(
    target: TargetModel, prompt: list[int], sizes: list[int], repeats: int = 3
) -> dict[int, float]:
    """ms of one target forward over ``n`` new tokens (a tree of n nodes) after ``prompt``:
    the median of ``repeats`` timed forwards after one untimed one, the cache put back after
    each (trimmed, or restored from a snapshot where it cannot be trimmed: hybrid targets)."""
    cache = target.make_cache()
    for start in range(0, len(prompt), PREFILL_CHUNK):
        chunk = mx.array(prompt[start : start + PREFILL_CHUNK])
        mx.eval(target.forward(chunk, cache, last_only=True).logits)
    depth = target.cache_length(cache)
    out = {}
    for n in sizes:
        tokens = mx.array([(7 * i + 3) % 100 for i in range(n)])
        times = []
        for attempt in range(repeats + 1):
            snapshot = None if target.can_trim(cache) else target.snapshot(cache)
            t0 = time.perf_counter()
            mx.eval(target.forward(tokens, cache).logits)
            if attempt:  # the first one warms up this shape
                times.append(time.perf_counter() - t0)
            if snapshot is None:
                target.trim(cache, n)
            else:
                target.restore(cache, snapshot)
        out[n] = 1000 * statistics.median(times)
        assert target.cache_length(cache) == depth
    return out
