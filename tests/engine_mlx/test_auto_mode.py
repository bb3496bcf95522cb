"""Auto mode: switching mid-generation loses nothing — the output equals plain greedy decoding,
and the idle drafter catches up on what was committed meanwhile."""

from __future__ import annotations

import pytest

from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.decoding.strategies import Autoregressive
from engine_mlx.events import Finished, ModeSwitch, Tokens
from engine_mlx.modes import Mode
from engine_mlx.session import Session
from tests.support.auto_driver import drive_auto
from tests.support.drafters import random_dflash

PROMPT = "Hello world, the quick brown fox"


def _plain(target, ids, n):
    return list(Session(target).generate(ids, GenerationConfig(max_tokens=n, ignore_eos=True)))[
        -1
    ].tokens


@pytest.mark.parametrize("arch", ["llama", "qwen3_5"])
def test_threshold_crossing_switches_and_stays_lossless(arch, tiny_target):
    target = tiny_target(arch)
    ids = target.tokenizer.encode(PROMPT)
    drafter = DFlashDrafter(random_dflash(target, conv=4), target)
    session = Session(target, drafter)
    threshold = len(ids) + 12
    config = GenerationConfig(
        max_tokens=40,
        mode="auto",
        policy="threshold",
        auto_threshold=threshold,
        ignore_eos=True,
        width=2,
    )
    events = list(session.generate(ids, config))
    switches = [e for e in events if isinstance(e, ModeSwitch)]
    assert [(s.from_mode, s.to_mode) for s in switches] == [("dflash2", "ar")]
    assert f"threshold {threshold:,}" in switches[0].reason
    steps = [e for e in events if isinstance(e, Tokens)]
    assert {e.step.mode for e in steps} == {"dflash2", "ar"}
    finished = events[-1]
    assert isinstance(finished, Finished)
    assert finished.tokens == _plain(target, ids, 40)
    assert set(finished.stats.modes) == {"dflash2", "ar"}


def _switch_every_few_steps(monkeypatch) -> None:
    """Auto mode switches between plain decoding and DFlash2 every five choices (a new reply:
    the policy's own choice), whatever the step costs say."""
    costs = StepCosts({(n, d): (30 + n) / 1000 for n in (1, 2, 4, 8, 16) for d in (0, 1024)})
    drive_auto(
        monkeypatch,
        lambda k: costs,
        lambda k, current: (Mode.DFLASH2 if (k // 5) % 2 else Mode.AR) if current else None,
    )


@pytest.mark.parametrize("arch", ["llama", "qwen3_5"])
def test_switching_back_and_forth_is_lossless(arch, tiny_target, monkeypatch):
    target = tiny_target(arch)
    ids = target.tokenizer.encode(PROMPT)
    drafter = DFlashDrafter(random_dflash(target), target)
    session = Session(target, drafter)
    config = GenerationConfig(max_tokens=60, mode="auto", ignore_eos=True, width=3)
    _switch_every_few_steps(monkeypatch)
    events = list(session.generate(ids, config))
    switches = [e for e in events if isinstance(e, ModeSwitch)]
    directions = {(s.from_mode, s.to_mode) for s in switches}
    assert directions == {("dflash2", "ar"), ("ar", "dflash2")}
    assert all(s.reason for s in switches)
    assert events[-1].tokens == _plain(target, ids, 60)
    # Every token that went through the target reached the drafter, observed or deferred
    # while plain decoding ran (all committed tokens but the last, the unfed root).
    drafter.catch_up()
    assert drafter.context_length >= len(ids) + 60 - 1


def test_forced_mode_and_unavailable_modes(tiny_target):
    target = tiny_target("llama")
    ids = target.tokenizer.encode(PROMPT)
    session = Session(target)  # no drafter: auto chooses between plain and prompt lookup
    assert session.auto_modes == ["ar", "lookup"]
    config = GenerationConfig(max_tokens=20, mode="auto", ignore_eos=True)
    policy = session.policy(config)
    policy.forced = "lookup"
    events = list(session.generate(ids, config))
    assert {e.step.mode for e in events if isinstance(e, Tokens)} == {"lookup"}
    assert events[-1].tokens == _plain(target, ids, 20)


@pytest.mark.parametrize("arch", ["llama", "qwen3_5"])
def test_plain_decoding_hands_over_without_discarding_its_queued_forward(
    arch, tiny_target, monkeypatch
):
    """Plain decoding queues each next forward ahead; a switch first commits that forward's
    token, so no forward is computed and thrown away, and the output stays plain's."""
    target = tiny_target(arch)
    ids = target.tokenizer.encode(PROMPT)
    session = Session(target, DFlashDrafter(random_dflash(target), target))
    config = GenerationConfig(max_tokens=60, mode="auto", ignore_eos=True, width=2)
    _switch_every_few_steps(monkeypatch)
    queued_at_release: list[bool] = []
    release = Autoregressive.release

    def spy(self):
        queued_at_release.append(self.queued_ahead)
        return release(self)

    monkeypatch.setattr(Autoregressive, "release", spy)
    events = list(session.generate(ids, config))
    assert queued_at_release and not any(queued_at_release)
    switches = [e for e in events if isinstance(e, ModeSwitch)]
    assert ("ar", "dflash2") in {(s.from_mode, s.to_mode) for s in switches}
    assert events[-1].tokens == _plain(target, ids, 60)
    assert sum(len(e.token_ids) for e in events if isinstance(e, Tokens)) == 60
