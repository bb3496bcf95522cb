"""Where a sampled token's time goes at the app's defaults, stage by stage (``bench
--sampler-cost``'s split), and the inputs every sampler measurement shares.

With the C filters, one call does every stage, so the call is timed asked for one more thing
at a time: the pass that selects the top-k, the penalty, top-p on the survivors, the draw;
then the sampler's own glue around it (arrays in and out, its context), and the scatter back to
a vocabulary-sized row that only ``logprobs`` pays. With the MLX ops (a GPU's path), each op is
timed alone on evaluated inputs. Each figure is the fastest of its repeats: these are tens of
microseconds, and a busy machine's noise would swamp a median's differences.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import mlx.core as mx
import numpy as np

from engine_mlx import compute_path
from engine_mlx.cpu.sampler import Filters, HostSampler, host_sampler
from engine_mlx.decoding import filters
from engine_mlx.decoding.sampling import Sampler, SamplingParams

CONTEXT = 1024  # tokens in the penalised context (the prompt and the reply so far)
DEFAULTS = SamplingParams(0.7, top_k=20, top_p=0.8, repetition_penalty=1.05)


def lm_logits(rows: int, vocab: int, seed: int = 0) -> np.ndarray:
    """Logits shaped like a language model's: a broad body and a few dozen tokens well above
    it, where most of the probability is (i.i.d. normal logits would make top-p keep
    thousands of tokens, which no trained model's next-token distribution does)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(-2.0, 2.0, size=(rows, vocab)).astype(np.float32)
    for row in x:
        peaks = rng.choice(vocab, size=40, replace=False)
        row[peaks] += rng.uniform(6.0, 14.0, size=40).astype(np.float32)
    return x


@dataclass(frozen=True)
class Inputs:
    """One measurement's rows: one is plain decoding's ([V] logits, the newest token as its
    extra context), more are a verification's ([rows, V], each row's path)."""

    logits: mx.array  # evaluated, as the CPU's forward leaves them
    extra: mx.array
    context: list[int]

    def sampler(self, params: SamplingParams, native: bool = True) -> Sampler:
        sampler = Sampler(params, native=native)
        sampler.remember(self.context)
        return sampler


def inputs(vocab: int, rows: int) -> Inputs:
    rng = np.random.default_rng(vocab + rows)
    logits = mx.array(lm_logits(rows, vocab, seed=rows))
    if rows == 1:
        logits, extra = logits[0], mx.array(rng.integers(0, vocab, size=1, dtype=np.int32))
    else:
        extra = mx.array(rng.integers(0, vocab, size=(rows, rows), dtype=np.int32))
    mx.eval(logits, extra)
    return Inputs(logits, extra, rng.integers(0, vocab, size=CONTEXT).tolist())


def fastest_ms(run: Callable[[], Any], repeats: int) -> float:
    mx.eval(run())
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        mx.eval(run())
        best = min(best, time.perf_counter() - start)
    return 1000 * best


def stage_costs(vocab: int, rows: int, repeats: int) -> list[tuple[str, float]]:
    """(stage, ms) at the defaults, by the path ``Sampler`` takes here."""
    data = inputs(vocab, rows)
    host = host_sampler() if compute_path.cpu_path() else None
    return _c_stages(host, data, repeats) if host is not None else _mlx_stages(data, repeats)


def _c_stages(host: HostSampler, data: Inputs, repeats: int) -> list[tuple[str, float]]:
    x = np.asarray(data.logits).reshape(-1, data.logits.shape[-1])
    extra = np.asarray(data.extra).reshape(len(x), -1)
    seen = np.zeros(x.shape[1], dtype=np.uint8)
    seen[data.context] = 1
    uniforms = np.full(len(x), 0.5, dtype=np.float32)
    top_k = Filters(DEFAULTS.temperature, DEFAULTS.top_k)
    penalised = replace(top_k, penalty=DEFAULTS.repetition_penalty)
    defaults = replace(penalised, top_p=DEFAULTS.top_p)
    sampler = data.sampler(DEFAULTS)

    def c(filters_: Filters, **kw: Any) -> float:
        if filters_.penalty != 1.0:
            kw |= {"seen": seen, "extra": extra}
        return fastest_ms(lambda: host.run(x, filters_, **kw), repeats)

    whole = fastest_ms(lambda: sampler.sample(data.logits, data.extra), repeats)
    cumulative = [
        ("one pass: top-k selection", c(top_k)),
        ("+ penalty (seen tokens only)", c(penalised)),
        ("+ top-p on the survivors", c(defaults)),
        ("+ draw among the survivors", c(defaults, uniforms=uniforms)),
        ("+ the sampler around it", whole),
    ]
    stages = [(cumulative[0][0], cumulative[0][1])]
    stages += [(name, ms - cumulative[i][1]) for i, (name, ms) in enumerate(cumulative[1:])]
    scatter = c(defaults, dense=True) - cumulative[2][1]
    return [*stages, ("scatter back (logprobs only)", scatter)]


def _mlx_stages(data: Inputs, repeats: int) -> list[tuple[str, float]]:
    sampler = data.sampler(DEFAULTS, native=False)
    adjusted = sampler.adjusted(data.logits, data.extra)
    scaled = adjusted / DEFAULTS.temperature
    ids, logprobs = filters.candidates(adjusted, DEFAULTS)
    mx.eval(adjusted, scaled, ids, logprobs)
    selection = fastest_ms(lambda: filters.top_k_indices(scaled, DEFAULTS.top_k), repeats)
    both = fastest_ms(lambda: filters.candidates(adjusted, DEFAULTS), repeats)

    def draw() -> mx.array:
        choice = mx.random.categorical(logprobs)[..., None].astype(mx.int32)
        return mx.take_along_axis(ids, choice, axis=-1)

    vocab = data.logits.shape[-1]
    penalty = fastest_ms(lambda: sampler.adjusted(data.logits, data.extra), repeats)
    scatter = fastest_ms(lambda: filters.dense(ids, logprobs, vocab), repeats)
    return [
        ("penalty (seen tokens only)", penalty),
        ("top-k selection", selection),
        ("top-p on the survivors", both - selection),
        ("draw among the survivors", fastest_ms(draw, repeats)),
        ("scatter back (logprobs only)", scatter),
    ]
