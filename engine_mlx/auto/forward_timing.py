"""Timing the target's forward: what one forward over n tokens costs at a given depth.

Used by the step-cost calibration (``step_costs``) and the benchmarks alike, so both measure
the same way: a context (the prompt prefilled in the engine's chunks, or for the calibration
a synthetic one of the same depth), one untimed forward per shape to warm it up, the cache
put back after every timed one.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import ArraysCache, KVCache

from engine_mlx.models.inplace_kv_cache import InPlaceKVCache
from engine_mlx.models.target import TargetModel

PREFILL_CHUNK = 512

FILLER = (
    "The history of computing is a story of abstractions layered on one another, from "
    "switches and gates to instruction sets, compilers, operating systems and networks. "
)


def depth_prompt(target: TargetModel, depth: int) -> list[int]:
    """Exactly ``depth`` tokens of deterministic prose (none at depth 0)."""
    if depth <= 0:
        return []
    return target.tokenizer.encode(FILLER * (depth // 8 + 4))[:depth]


def prefill_cost(target: TargetModel, prompt: list[int], repeats: int = 3) -> float:
    """ms to prefill ``prompt`` into a fresh cache in the engine's chunks: median of
    ``repeats`` after one untimed run."""
    times = []
    for attempt in range(repeats + 1):
        t0 = time.perf_counter()
        prefilled(target, prompt)
        if attempt:
            times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def prefilled(target: TargetModel, prompt: list[int]) -> list[Any]:
    """A new cache holding ``prompt``, prefilled in the engine's chunks (evaluated)."""
    cache = target.make_cache()
    for start in range(0, len(prompt), PREFILL_CHUNK):
        chunk = mx.array(prompt[start : start + PREFILL_CHUNK])
        mx.eval(target.forward(chunk, cache, last_only=True).logits)
    return cache


def verify_costs(
    target: TargetModel, prompt: list[int], sizes: list[int], repeats: int = 3
) -> dict[int, float]:
    """ms of one target forward over ``n`` new tokens (a tree of n nodes) after ``prompt``
    (``time_forwards``)."""
    return time_forwards(target, prefilled(target, prompt), sizes, repeats)


def synthetic_context(target: TargetModel, depth: int) -> list[Any]:
    """A cache ``depth`` tokens deep whose attention keys and values are random: what a
    forward costs depends on how deep its context is, not on what it says, and prefilling
    4,096 tokens takes the Qwen demo ~48 s on a 2-core CPU where this takes milliseconds.
    A few real tokens go first, so recurrent layers hold real state; a cache of another
    kind (one that cannot be extended this way) is prefilled for real."""
    head = depth_prompt(target, min(depth, 4))
    cache = target.make_cache()
    if head:
        mx.eval(target.forward(mx.array(head), cache, last_only=True).logits)
    rest = depth - len(head)
    if rest <= 0:
        return cache
    if not all(type(c) in (KVCache, InPlaceKVCache, ArraysCache) for c in cache):
        return prefilled(target, depth_prompt(target, depth))
    key = mx.random.key(depth)
    for c in cache:
        if isinstance(c, KVCache):
            heads, dim = c.keys.shape[1], c.keys.shape[3]
            k1, k2, key = mx.random.split(key, 3)
            shape = (1, heads, rest, dim)
            keys = mx.random.normal(shape, dtype=c.keys.dtype, key=k1)
            values = mx.random.normal(shape, dtype=c.values.dtype, key=k2)
            mx.eval(c.update_and_fetch(keys, values))
    return cache


def time_forwards(
    target: TargetModel, cache: list[Any], sizes: list[int], repeats: int = 3
) -> dict[int, float]:
    """ms of one target forward over ``n`` new tokens after ``cache``'s context: the median
    of ``repeats`` timed forwards after one untimed one, the cache put back after each
    (trimmed, or restored from a snapshot where it cannot be trimmed: hybrid targets)."""
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
