"""What auto learned outlives the process: saved beside the step costs after every reply,
loaded by the next session of the same target and companions, ignored when damaged or old."""

from __future__ import annotations

import json
import time

import pytest

from engine_mlx.auto.mode_memory import ModeMemory, companion_fingerprint
from engine_mlx.auto.mode_record import ModeRecord
from engine_mlx.auto.step_costs import MAX_AGE_DAYS, StepCosts
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.decoding.strategies import LengthPlan
from engine_mlx.modes import Mode
from engine_mlx.session import Session
from tests.support.drafters import random_dflash


def _record() -> ModeRecord:
    record = ModeRecord(look_every=16)
    record.near, record.defeats = False, 2
    record.committed_extra, record.expected_extra = 1.5, 6.0
    for seconds in (0.020, 0.022):
        record.look_time.add(seconds)
        record.look_cost.add(seconds + 0.1)
        record.draft.add(seconds)
    record.look, record.look_pace = LengthPlan(3, 1.4, 0.08), 1.2
    return record


def test_a_record_round_trips(tmp_path):
    memory = ModeMemory(tmp_path / "m.json")
    memory.save({Mode.DFLASH2: _record()})
    records: dict[Mode, ModeRecord] = {}
    assert memory.load(records, look_every=4)
    loaded, saved = records[Mode.DFLASH2], _record()
    assert not loaded.near and loaded.look_every == 16 and loaded.defeats == 2
    assert loaded.honesty == pytest.approx(saved.honesty)
    assert loaded.look == saved.look and loaded.look_pace == 1.2
    assert list(loaded.look_cost.samples) == list(saved.look_cost.samples)
    assert not loaded.fresh_look_due and not loaded.ran_this_reply  # per reply: not kept


@pytest.mark.parametrize(
    "damage",
    [
        lambda d: "{not json",
        lambda d: json.dumps(d | {"format": 99}),
        lambda d: json.dumps(d | {"saved": time.time() - (MAX_AGE_DAYS + 1) * 86400}),
        lambda d: json.dumps(d | {"modes": {"dflash2": {"near": True}}}),
        lambda d: json.dumps(
            d | {"modes": {"dflash2": d["modes"]["dflash2"] | {"draft": [float("nan")]}}}
        ),
    ],
    ids=["not-json", "other-format", "too-old", "fields-missing", "not-a-number"],
)
def test_a_damaged_or_stale_file_is_ignored(tmp_path, damage):
    path = tmp_path / "m.json"
    ModeMemory(path).save({Mode.DFLASH2: _record()})
    path.write_text(damage(json.loads(path.read_text())))
    records = {Mode.MTP: ModeRecord()}
    assert not ModeMemory(path).load(records, look_every=4)
    assert set(records) == {Mode.MTP}  # untouched


def test_the_fingerprint_tells_companions_apart(tiny_target):
    target = tiny_target("llama")
    one = DFlashDrafter(random_dflash(target, seed=1), target)
    two = DFlashDrafter(random_dflash(target, seed=2), target)
    assert companion_fingerprint(one, None) == companion_fingerprint(one, None)
    assert companion_fingerprint(one, None) != companion_fingerprint(two, None)
    assert companion_fingerprint(one, None) != companion_fingerprint(None, None)
    assert companion_fingerprint(one, None, extra="a") != companion_fingerprint(one, None)


def test_a_new_session_starts_from_what_the_last_one_learned(tiny_target, tmp_path, monkeypatch):
    monkeypatch.setenv("FLASHCHAT_AUTO_MEMORY", "1")
    monkeypatch.setenv("FLASHCHAT_STEP_COSTS", str(tmp_path))
    target = tiny_target("llama")
    drafter = DFlashDrafter(random_dflash(target), target)
    costs = StepCosts({(n, d): (30 + n) / 1000 for n in (1, 2, 4, 8, 16) for d in (0, 1024)})
    monkeypatch.setattr(Session, "step_costs", lambda self: costs)
    config = GenerationConfig(max_tokens=12, mode="auto", ignore_eos=True)
    ids = target.tokenizer.encode("Hello world, the quick brown fox")
    first = Session(target, drafter)
    list(first.generate(ids, config))
    learned = first.policy(config).looks.record(Mode.DFLASH2)
    assert learned.look is not None
    assert [p.name for p in tmp_path.iterdir() if "-modes-" in p.name]
    second = Session(target, drafter)
    kept = second.policy(config).looks.record(Mode.DFLASH2)
    assert kept.look == learned.look and kept.near == learned.near
    assert list(kept.look_cost.samples) == list(learned.look_cost.samples)
    monkeypatch.setenv("FLASHCHAT_AUTO_MEMORY", "0")
    assert Session(target, drafter).policy(config).looks.record(Mode.DFLASH2).look is None
