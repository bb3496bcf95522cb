"""A kept prefill serves the next generation of the same (or an extended) prompt in every
mode, with output identical to a fresh prefill."""

from __future__ import annotations

import numpy as np
import pytest

from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.decoding.mtp_drafter import MTPDrafter
from engine_mlx.events import Finished
from engine_mlx.session import Session
from tests.support.drafters import random_dflash, random_mtp_head


def _session(target, reuse: bool) -> Session:
    drafter = DFlashDrafter(random_dflash(target, conv=2), target)
    mtp = MTPDrafter(random_mtp_head(target), target, steps=2)
    return Session(target, drafter, mtp, reuse_prompt=reuse)


def _finish(session: Session, prompt: list[int], mode: str) -> Finished:
    config = GenerationConfig(max_tokens=14, ignore_eos=True, mode=mode, prefill_chunk=16)
    return [e for e in session.generate(prompt, config) if isinstance(e, Finished)][-1]


@pytest.mark.parametrize("arch", ["llama", "qwen3_5"])
def test_kept_prefill_gives_the_fresh_output_in_every_mode(arch, tiny_target):
    target = tiny_target(arch)
    prompt = [(7 * i + 5) % 200 + 3 for i in range(40)]
    kept = _session(target, reuse=True)
    first = _finish(kept, prompt, "ar")
    assert first.stats.reused_prompt_tokens == 0
    for mode in ("dflash2", "mtp", "auto", "ar"):
        again = _finish(kept, prompt, mode)
        fresh = _finish(_session(target, reuse=False), prompt, mode)
        assert again.stats.reused_prompt_tokens == len(prompt)
        assert again.tokens == fresh.tokens == first.tokens
    longer = [*prompt, 11, 12, 13, 14, 15]
    extended = _finish(kept, longer, "dflash2")
    assert extended.stats.reused_prompt_tokens == len(prompt)
    assert extended.tokens == _finish(_session(target, reuse=False), longer, "dflash2").tokens


def test_a_different_prompt_is_prefilled_afresh(tiny_target):
    target = tiny_target("llama")
    kept = _session(target, reuse=True)
    _finish(kept, [5, 6, 7, 8, 9, 10], "ar")
    other = _finish(kept, [9, 8, 7, 6, 5, 4], "ar")
    assert other.stats.reused_prompt_tokens == 0
    assert other.tokens == _finish(_session(target, reuse=False), [9, 8, 7, 6, 5, 4], "ar").tokens


@pytest.mark.parametrize("arch", ["llama", "qwen3_5"])
def test_a_drafter_takes_its_kept_context_back_instead_of_observing_the_prompt_again(
    arch, tiny_target, monkeypatch
):
    target = tiny_target(arch)
    prompt = [(5 * i + 2) % 200 + 3 for i in range(40)]
    kept = _session(target, reuse=True)
    _finish(kept, prompt, "auto")  # both observe the prompt once, and keep their context
    assert set(kept.prefilled.drafters) == {kept.drafter, kept.mtp}
    fed: list[list[int]] = []
    for drafter in (kept.drafter, kept.mtp):
        observe = drafter.observe
        monkeypatch.setattr(
            drafter,
            "observe",
            lambda ids, f, observe=observe: fed.append(list(ids)) or observe(ids, f),
        )
    for mode in ("dflash2", "mtp"):  # each reply grows its drafter's context past the prompt
        again = _finish(kept, prompt, mode)
        assert again.tokens == _finish(_session(target, reuse=False), prompt, mode).tokens
    assert fed and not any(ids == prompt[:16] for ids in fed)  # no prompt chunk replayed
    # What each takes back drafts exactly as a twin that observed the prompt's features.
    twins = _session(target, reuse=False)
    for drafter, twin in ((kept.drafter, twins.drafter), (kept.mtp, twins.mtp)):
        drafter.restore_context(kept.prefilled.drafters[drafter])
        twin.reset()
        for ids, feats in kept.prefilled.features_for(twin.capture_layers):
            twin.observe(ids, feats)
        got, want = drafter.propose(17, 4, 3), twin.propose(17, 4, 3)
        assert np.array_equal(got.tokens, want.tokens)
        np.testing.assert_allclose(got.probs, want.probs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["ar", "dflash2", "mtp"])
def test_a_prompt_that_shares_only_a_beginning_reuses_that_much(tiny_target, mode):
    """A thinking model's next turn drops the ``<think>`` the last prompt ended in: the
    shared beginning is reused (the cache cut back, drafter features replayed), the output
    is a fresh prefill's. The chunk size cuts the shared part mid-chunk."""
    target = tiny_target("llama")
    turn_1 = [(7 * i + 5) % 200 + 3 for i in range(40)]
    turn_2 = [*turn_1[:37], 9, 8, 7, 6, 5, 4, 3, 2]  # the last 3 differ, then more
    kept = _session(target, reuse=True)
    _finish(kept, turn_1, mode)
    again = _finish(kept, turn_2, mode)
    fresh = _finish(_session(target, reuse=False), turn_2, mode)
    assert again.stats.reused_prompt_tokens == 37
    assert again.tokens == fresh.tokens
    shorter = turn_2[:20]  # a prefix of the kept prompt: all but its last token
    assert _finish(kept, shorter, mode).stats.reused_prompt_tokens == 19


def test_a_hybrid_target_cannot_cut_its_state_back_and_prefills_afresh(tiny_target):
    target = tiny_target("qwen3_5")
    turn_1 = [(7 * i + 5) % 200 + 3 for i in range(40)]
    turn_2 = [*turn_1[:37], 9, 8, 7]
    kept = _session(target, reuse=True)
    _finish(kept, turn_1, "ar")
    again = _finish(kept, turn_2, "ar")
    assert again.stats.reused_prompt_tokens == 0
    assert again.tokens == _finish(_session(target, reuse=False), turn_2, "ar").tokens
