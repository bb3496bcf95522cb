"""The mode choice alone, on rates given to it: the best rate wins, by a margin against
flapping that doubles for a mode each time it ran behind plain decoding and was left; back to
plain needs no margin; a newly chosen mode settles unless a rival beats the look it was chosen
by; a mode whose look comes close is tried once a reply."""

from __future__ import annotations

import pytest

from engine_mlx.auto.looks import TRIAL_WITHIN, Looks
from engine_mlx.auto.mode_choice import IDLE_TRIAL_STEPS, REJOIN_BACKOFF, ModeChoice
from engine_mlx.auto.mode_record import SETTLE_STEPS
from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.decoding.strategies import LengthPlan
from engine_mlx.modes import Mode

PLAIN = LengthPlan(0, 1.0, 0.030)  # plain decoding: a token in 30 ms


def _choice(modes=(Mode.AR, Mode.DFLASH2, Mode.MTP)) -> ModeChoice:
    costs = StepCosts({(n, d): 0.030 + (n - 1) / 1000 for n in (1, 2, 4, 8, 16) for d in (0, 1024)})
    return ModeChoice(Looks(list(modes), lambda: costs), hysteresis=0.1)


def _times_plain(x: float, tokens: float = 2.0) -> LengthPlan:
    """A drafting mode's rate: ``x`` times plain decoding's."""
    return LengthPlan(3, tokens, tokens * PLAIN.predicted_s / x)


def _looked(choice: ModeChoice, mode: Mode, x: float) -> LengthPlan:
    """``mode`` was looked at, ``x`` times plain: its rate is its look."""
    plan = _times_plain(x)
    choice.looks.set_look(choice.looks.record(mode), plan)
    return plan


def _used_up(choice: ModeChoice, *modes: Mode) -> None:
    """``modes`` ran in this reply: no trial for them, no settling when rejoined."""
    for mode in modes:
        choice.looks.record(mode).ran_this_reply = True


def test_a_new_reply_starts_in_the_best_mode_without_a_margin():
    choice = _choice()
    rates = {Mode.AR: PLAIN, Mode.DFLASH2: _times_plain(1.02)}
    assert choice.choose(rates, 0, None).mode is Mode.DFLASH2
    assert choice.choose({Mode.AR: PLAIN}, 0, None).mode is Mode.AR


def test_a_switch_to_a_drafting_mode_needs_the_margin_and_says_why():
    choice = _choice()
    _used_up(choice, Mode.DFLASH2)  # no trial: the margin alone decides
    inside = {Mode.AR: PLAIN, Mode.DFLASH2: _looked(choice, Mode.DFLASH2, 1.08)}
    assert choice.choose(inside, 0, Mode.AR).mode is Mode.AR
    switch = choice.choose(
        {Mode.AR: PLAIN, Mode.DFLASH2: _looked(choice, Mode.DFLASH2, 1.12)}, 2048, Mode.AR
    )
    assert switch.mode is Mode.DFLASH2
    assert switch.reason.startswith("DFlash2, 4 tokens verified: expects 2.0 tok/step")
    assert "Plain 1.0 tok/step at 30 ms" in switch.reason and "(context 2,048)" in switch.reason


def test_back_to_plain_needs_no_margin_and_counts_a_defeat():
    choice = _choice()
    _used_up(choice, Mode.DFLASH2)
    state = choice.looks.record(Mode.DFLASH2)
    state.steps_since_join = SETTLE_STEPS  # settled
    ran = _times_plain(0.98)  # 2% behind plain: well inside the 10% margin
    left = choice.choose({Mode.AR: PLAIN, Mode.DFLASH2: ran}, 0, Mode.DFLASH2)
    assert left.mode is Mode.AR and left.reason.startswith("Plain: expects 1.0 tok/step")
    assert state.defeats == 1 and state.look == ran  # its look is now what it did


def test_the_rejoin_margin_doubles_after_each_defeat():
    choice = _choice((Mode.AR, Mode.DFLASH2))
    _used_up(choice, Mode.DFLASH2)

    def rejoins(x: float) -> bool:
        rates = {Mode.AR: PLAIN, Mode.DFLASH2: _looked(choice, Mode.DFLASH2, x)}
        return choice.choose(rates, 0, Mode.AR).mode is Mode.DFLASH2

    def runs_behind_plain() -> None:
        rates = {Mode.AR: PLAIN, Mode.DFLASH2: _times_plain(0.9)}
        assert choice.choose(rates, 0, Mode.DFLASH2).mode is Mode.AR

    assert choice._join_margin(Mode.DFLASH2) == pytest.approx(0.1)
    assert rejoins(1.15)
    for defeats in (1, 2, 3):
        runs_behind_plain()
        margin = 0.1 * REJOIN_BACKOFF**defeats
        assert choice._join_margin(Mode.DFLASH2) == pytest.approx(margin)
        assert not rejoins(1 + margin - 0.02) and rejoins(1 + margin + 0.02)
    # New text forgives one defeat a reply, not all: the mode lost here, and on a CPU where
    # it loses it would be joined and lost again at every reply's start.
    for defeats in (2, 1, 0, 0):
        choice.looks.new_reply()
        assert choice._join_margin(Mode.DFLASH2) == pytest.approx(0.1 * REJOIN_BACKOFF**defeats)


def test_a_drafting_mode_that_was_not_behind_plain_is_left_without_a_defeat():
    choice = _choice()
    _used_up(choice, Mode.DFLASH2, Mode.MTP)
    choice.looks.record(Mode.DFLASH2).steps_since_join = SETTLE_STEPS
    _looked(choice, Mode.MTP, 2.0)
    rates = {Mode.AR: PLAIN, Mode.DFLASH2: _times_plain(1.5), Mode.MTP: _times_plain(2.0)}
    assert choice.choose(rates, 0, Mode.DFLASH2).mode is Mode.MTP
    assert choice.looks.record(Mode.DFLASH2).defeats == 0


def test_a_settling_mode_is_kept_unless_a_rival_beats_its_look_by_the_margin():
    choice = _choice()
    _looked(choice, Mode.MTP, 1.5)  # the look MTP is chosen by
    chosen = choice.choose({Mode.AR: PLAIN, Mode.MTP: _times_plain(1.5)}, 0, Mode.AR)
    assert chosen.mode is Mode.MTP and choice._settling(Mode.MTP)
    unlucky = _times_plain(0.6)  # its first steps run behind plain
    for _ in range(SETTLE_STEPS):
        rates = {Mode.AR: PLAIN, Mode.MTP: unlucky, Mode.DFLASH2: _times_plain(1.6)}
        assert choice.choose(rates, 0, Mode.MTP).mode is Mode.MTP  # 1.6 < 1.5 x 1.1
        choice.looks.record(Mode.MTP).steps_since_join += 1
    assert not choice._settling(Mode.MTP)
    assert choice.choose({Mode.AR: PLAIN, Mode.MTP: unlucky}, 0, Mode.MTP).mode is Mode.AR


def test_a_rival_whose_look_beats_the_settling_modes_look_takes_over():
    choice = _choice()
    _looked(choice, Mode.MTP, 1.5)
    assert choice.choose({Mode.AR: PLAIN, Mode.MTP: _times_plain(1.5)}, 0, Mode.AR).mode is Mode.MTP
    rates = {Mode.AR: PLAIN, Mode.MTP: _times_plain(0.6), Mode.DFLASH2: _times_plain(1.7)}
    assert choice.choose(rates, 0, Mode.MTP).mode is Mode.DFLASH2  # 1.7 > 1.5 x 1.1


def test_while_a_mode_settles_each_rival_needs_its_own_rejoin_margin():
    choice = _choice((Mode.AR, Mode.DFLASH2, Mode.MTP, Mode.LOOKUP))
    choice.looks.record(Mode.DFLASH2).defeats = 2  # left twice: a 40% margin
    _looked(choice, Mode.MTP, 1.5)
    assert choice.choose({Mode.AR: PLAIN, Mode.MTP: _times_plain(1.5)}, 0, Mode.AR).mode is Mode.MTP
    rates = {
        Mode.AR: PLAIN,
        Mode.MTP: _times_plain(0.6),
        Mode.DFLASH2: _times_plain(2.0),  # < 1.5 x 1.4
        Mode.LOOKUP: _times_plain(1.7),  # > 1.5 x 1.1
    }
    assert choice.choose(rates, 0, Mode.MTP).mode is Mode.LOOKUP


def test_plans_that_keep_declining_the_draft_end_the_settling():
    choice = _choice()
    _looked(choice, Mode.MTP, 1.5)
    choice.choose({Mode.AR: PLAIN, Mode.MTP: _times_plain(1.5)}, 0, Mode.AR)
    choice.looks.record(Mode.MTP).idle_steps_this_reply = IDLE_TRIAL_STEPS
    assert choice.choose({Mode.AR: PLAIN, Mode.MTP: _times_plain(0.6)}, 0, Mode.MTP).mode is Mode.AR


def test_a_rejoined_mode_does_not_settle_again():
    choice = _choice()
    _used_up(choice, Mode.MTP)
    _looked(choice, Mode.MTP, 1.5)
    assert choice.choose({Mode.AR: PLAIN, Mode.MTP: _times_plain(1.5)}, 0, Mode.AR).mode is Mode.MTP
    assert not choice._settling(Mode.MTP)
    assert choice.choose({Mode.AR: PLAIN, Mode.MTP: _times_plain(0.6)}, 0, Mode.MTP).mode is Mode.AR


def test_a_trial_is_offered_once_a_reply_when_its_look_comes_close_and_could_win():
    choice = _choice((Mode.AR, Mode.DFLASH2))
    # 1.2 tokens in 40 ms: 0.9x plain, within TRIAL_WITHIN; twice its drafted tokens, 1.4 in
    # 40 ms, would beat plain decoding
    close = LengthPlan(1, 1.2, 0.040)
    choice.looks.set_look(choice.looks.record(Mode.DFLASH2), close)
    trial = choice.choose({Mode.AR: PLAIN, Mode.DFLASH2: close}, 0, Mode.AR)
    assert trial.mode is Mode.DFLASH2 and trial.reason.startswith("trying DFlash2")
    assert choice._settling(Mode.DFLASH2)  # its first run in the reply: a few steps
    _used_up(choice, Mode.DFLASH2)  # it ran
    assert choice.choose({Mode.AR: PLAIN, Mode.DFLASH2: close}, 0, Mode.AR).mode is Mode.AR
    choice.looks.new_reply()  # a new reply: a trial again
    choice.looks.set_look(choice.looks.record(Mode.DFLASH2), close)
    assert choice.choose({Mode.AR: PLAIN, Mode.DFLASH2: close}, 0, Mode.AR).mode is Mode.DFLASH2


@pytest.mark.parametrize(
    "look",
    [
        LengthPlan(1, 1.1, 0.040),  # 0.82x plain, but twice its drafted tokens: 0.9x
        LengthPlan(3, 2.0, 0.030 * 2 / (TRIAL_WITHIN - 0.02)),  # not within TRIAL_WITHIN
    ],
)
def test_no_trial_for_a_look_that_could_not_win_or_is_not_close(look):
    choice = _choice((Mode.AR, Mode.DFLASH2))
    choice.looks.set_look(choice.looks.record(Mode.DFLASH2), look)
    assert choice.choose({Mode.AR: PLAIN, Mode.DFLASH2: look}, 0, Mode.AR).mode is Mode.AR


def test_no_trial_away_from_a_running_drafting_mode_nor_for_a_mode_never_looked_at():
    choice = _choice()
    even = _looked(choice, Mode.DFLASH2, 1.0)  # plain's rate: twice its drafts would win
    _used_up(choice, Mode.MTP)
    choice.looks.record(Mode.MTP).steps_since_join = SETTLE_STEPS
    rates = {Mode.AR: PLAIN, Mode.DFLASH2: even, Mode.MTP: _times_plain(1.05)}
    assert choice.choose(rates, 0, Mode.MTP).mode is Mode.MTP  # it has its own steps
    close = LengthPlan(1, 1.2, 0.040)
    unlooked = _choice((Mode.AR, Mode.DFLASH2))  # rated, say, by its own steps elsewhere
    assert unlooked.choose({Mode.AR: PLAIN, Mode.DFLASH2: close}, 0, Mode.AR).mode is Mode.AR
