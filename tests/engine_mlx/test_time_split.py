"""Where a reply's decode time goes (``stats.TimeSplit``): every part accounted for, the looks
and the policy's bookkeeping apart from the steps, so a cost auto adds shows in the bench."""

from __future__ import annotations

import pytest

from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.events import Finished
from engine_mlx.modes import Mode
from engine_mlx.session import Session
from engine_mlx.stats import TIME_PARTS, StepStats, TimeSplit
from tests.support.drafters import random_dflash

PROMPT = "one two three one two three one two"


def test_a_step_that_verified_a_draft_splits_into_draft_and_verify():
    split = TimeSplit()
    split.add_step(StepStats(mode=Mode.DFLASH2, committed=3, drafted=4, draft_s=0.01), 0.05, False)
    split.add_step(StepStats(mode=Mode.LOOKUP, committed=1, drafted=0), 0.03, False)
    split.add_step(StepStats(mode=Mode.MTP, committed=2, drafted=2, draft_s=0.01), 0.04, True)
    parts = split.as_dict(decode_s=0.2)
    assert parts["draft"] == pytest.approx(0.01) and parts["verify"] == pytest.approx(0.04)
    assert parts["plain"] == pytest.approx(0.03)  # a step whose plan declined the draft
    assert parts["switch"] == pytest.approx(0.04)
    assert parts["output"] == pytest.approx(0.2 - 0.12)
    assert tuple(parts) == TIME_PARTS


def _finished(session: Session, mode: str) -> Finished:
    ids = session.target.tokenizer.encode(PROMPT)
    config = GenerationConfig(max_tokens=24, mode=mode, ignore_eos=True)
    events = list(session.generate(ids, config))
    assert isinstance(events[-1], Finished)
    return events[-1]


def test_plain_decoding_is_all_plain_steps(tiny_target):
    finished = _finished(Session(tiny_target("llama")), "ar")
    split = finished.stats.time_split
    assert set(split) == set(TIME_PARTS)
    assert split["plain"] > 0
    assert all(split[p] == 0 for p in ("draft", "verify", "looks", "policy", "switch"))


def test_autos_split_adds_up_to_its_decode_time_and_shows_its_looks(tiny_target, monkeypatch):
    target = tiny_target("llama")
    costs = StepCosts({(n, d): (30 + n) / 1000 for n in (1, 2, 4, 8, 16) for d in (0, 1024)})
    monkeypatch.setattr(Session, "step_costs", lambda self: costs)
    session = Session(target, DFlashDrafter(random_dflash(target), target))
    finished = _finished(session, "auto")
    split, stats = finished.stats.time_split, finished.stats
    decode_s = (stats.generated_tokens - 1) / stats.decode_tps
    assert sum(split.values()) == pytest.approx(decode_s, rel=1e-6)
    assert split["looks"] > 0  # a new reply looks at each drafting mode first
    assert split["policy"] > 0
