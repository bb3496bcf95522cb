"""Sampled replies against plain sampling's exact distribution, position by position.

Each reply's token at position j is compared with plain sampling's conditional distribution
given that reply's own first j tokens, computed by one teacher-forced forward and the
engine's plain sampler. Pooled over replies, position j's observed counts must fit the sum
of those distributions (``statistics.goodness_of_fit_p``): one sampled arm against exact
expectations, twice as informative per second as two sampled arms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

import mlx.core as mx
import numpy as np

from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.sampling import Sampler, SamplingParams
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session
from tests.support.statistics import goodness_of_fit_p

Reply = tuple[int, ...]


def sample_replies(
    session: Session, prompt: list[int], seeds: Sequence[int], length: int, **config
) -> tuple[list[Reply], int]:
    """One reply of ``length`` tokens per seed (``config`` for GenerationConfig, with
    ``sampling`` a SamplingParams whose seed is replaced), and the drafts accepted in all."""
    params = config.pop("sampling")
    replies, accepted = [], 0
    for seed in seeds:
        sampling = replace(params, seed=seed)
        cfg = GenerationConfig(max_tokens=length, ignore_eos=True, sampling=sampling, **config)
        finished = list(session.generate(prompt, cfg))[-1]
        assert finished.reason == "max_tokens", finished
        replies.append(tuple(finished.tokens))
        accepted += finished.stats.accepted
    return replies, accepted


def plain_conditionals(
    target: TargetModel, prompt: list[int], replies: Sequence[Reply], params: SamplingParams
) -> dict[Reply, np.ndarray]:
    """Prefix -> plain sampling's distribution of the next token, for every proper prefix of
    every reply: one forward per reply after the shared prompt, the engine's sampler on each
    row (the context it counts: the prompt and the prefix)."""
    cache = target.make_cache()
    if len(prompt) > 1:
        target.forward(mx.array(prompt[:-1]), cache)
    start = target.snapshot(cache)
    out: dict[Reply, np.ndarray] = {}
    for reply in dict.fromkeys(replies):
        if all(reply[:j] in out for j in range(len(reply))):
            continue
        logits = target.forward(mx.array([prompt[-1], *reply[:-1]]), cache).logits[0]
        target.restore(cache, start)
        for j in range(len(reply)):
            sampler = Sampler(params)
            sampler.remember(prompt + list(reply[:j]))
            out[reply[:j]] = np.exp(np.array(sampler.logprobs(logits[j])))
    return out


def position_p_values(
    target: TargetModel, prompt: list[int], replies: Sequence[Reply], params: SamplingParams
) -> list[float]:
    """Per position, the p-value that the replies' tokens there were drawn from plain
    sampling's distribution given each reply's prefix."""
    plain = plain_conditionals(target, prompt, replies, params)
    p_values = []
    for j in range(len(replies[0])):
        expected: Counter = Counter()
        for reply in replies:
            probs = plain[reply[:j]]
            for token in np.nonzero(probs)[0].tolist():
                expected[token] += float(probs[token])
        p_values.append(goodness_of_fit_p(Counter(r[j] for r in replies), expected))
    return p_values
