"""Which mode runs the next step, given what each mode is expected to do here (its rate): the
best, with a margin against flapping; a newly chosen mode's first steps shielded; a trial for a
mode whose look comes close.

Its own module because the choice is a rule on rates, whoever made them: the expected-rate
policy (``rate_policy``) rates the modes and asks it, and the looks (``looks``) keep what it
reads and writes of each mode.

- **mode**: the best rate wins, with a margin against flapping that doubles
  (``REJOIN_BACKOFF``) for a mode each time it ran behind plain decoding and was left (one
  such defeat forgiven per new reply); back to plain decoding, being faster is enough. A mode
  just chosen settles for a few steps (``_settling``) unless a rival's look beats the look
  it was chosen by;
- **a trial** (``_worth_a_trial``): a look is a forecast from estimates made on other text,
  so a mode whose look comes within ``TRIAL_WITHIN`` of the best rate, and would beat it were
  its drafted tokens ``TRIAL_UPSIDE`` times what the look expects, runs once per reply until
  its own steps say what it does here (a few steps, at worst a little slower).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine_mlx.auto.length_plan import per_s, upside
from engine_mlx.auto.looks import TRIAL_WITHIN, Looks
from engine_mlx.auto.mode_record import SETTLE_STEPS
from engine_mlx.auto.policy import Choice
from engine_mlx.decoding.strategies import LengthPlan
from engine_mlx.modes import Mode

IDLE_TRIAL_STEPS = 3  # steps whose plans verified no draft after which a trial is used up
# The margin a look must clear to rejoin a mode doubles each time that mode, in this reply,
# ran behind plain decoding and was left.
REJOIN_BACKOFF = 2.0


@dataclass
class ModeChoice:
    looks: Looks  # each mode's record: its looks, its defeats, whether it ran in this reply
    hysteresis: float = 0.1  # the margin against flapping

    def choose(self, rates: Mapping[Mode, LengthPlan], depth: int, current: Mode | None) -> Choice:
        """The mode for the next step. ``rates``: every mode rated here (plain decoding at
        least), the running one by its own recent steps; ``current``: the running mode (None:
        a new reply, which starts in the best)."""
        rates = dict(rates)
        best = max(rates, key=lambda m: per_s(rates[m]))
        if current is None:
            return Choice(best)
        if current is not Mode.AR and self._settling(current):
            chosen_by = self.looks.repriced(self.looks.record(current))
            rival = self._rival_while_settling(current, chosen_by, rates) if chosen_by else None
            if chosen_by is None or rival is None:
                return Choice(current)
            rates[current], best = chosen_by, rival
        here = rates.get(current)
        # The margin against flapping guards the switches that cost something (a drafter
        # catching up, an untimed first step); back to plain decoding, being faster is enough.
        margin = 0.0 if best is Mode.AR else self._join_margin(best)
        if best != current and (here is None or per_s(rates[best]) > per_s(here) * (1 + margin)):
            if current is not Mode.AR and here is not None:  # leaving: its look is what it did
                self.looks.set_look(self.looks.record(current), here)
                plain = rates.get(Mode.AR)
                if plain is not None and per_s(here) < per_s(plain):
                    self.looks.record(current).defeats += 1
                    self.looks.record(current).near = False
            if best is not Mode.AR:  # joining: its own steps will say how it does now
                self._join(best)
            return Choice(best, _reason(best, rates[best], depth, current, here))
        trial = self._worth_a_trial(rates, best) if current is Mode.AR else None
        if trial is not None:
            self._join(trial)
            why = _reason(trial, rates[trial], depth, current, here)
            return Choice(trial, f"trying {why}")
        return Choice(current)

    def _rival_while_settling(
        self, current: Mode, chosen_by: LengthPlan, rates: dict[Mode, LengthPlan]
    ) -> Mode | None:
        """A drafting mode whose look beats ``chosen_by`` (the look ``current`` was chosen
        by) by the margin: settling shields a mode from its own first steps, not from a better
        look. Frozen for its 3 steps, MTP, chosen on a reply's first looks at 4k of prose
        (DFlash2's first draft there, at the reply's first token, promised 1.04 tokens), ran on
        while DFlash2's next look promised 2.8 tokens a step, and then committed 4-8 (Qwen)."""
        rivals = [m for m in rates if m not in (current, Mode.AR)]
        beats = [
            m for m in rivals if per_s(rates[m]) > per_s(chosen_by) * (1 + self._join_margin(m))
        ]
        return max(beats, key=lambda m: per_s(rates[m])) if beats else None

    def _join_margin(self, mode: Mode) -> float:
        """How far a look must beat the running mode to switch to ``mode``: the margin
        against flapping, doubled for every time ``mode`` ran behind plain decoding and was
        left (one forgiven per new reply). A look is one draft's scores, and a switch made on
        the best of many noisy looks meets the mean on arrival: on the Qwen demo's chat question
        (sampled), looks at MTP and DFlash2 promised 1.4-1.8 tokens a step, and auto switched
        to them 9 times in 120 tokens; their steps committed 1.0-1.3 at 145-200 ms, behind
        plain decoding's 125 ms a token, each time."""
        return self.hysteresis * REJOIN_BACKOFF ** self.looks.record(mode).defeats

    def _join(self, mode: Mode) -> None:
        state = self.looks.record(mode)
        state.realised = state.expected = state.verified = None
        # Settling is for a mode's first run in a reply: rejoined, its steps here are known.
        state.steps_since_join = SETTLE_STEPS if state.ran_this_reply else 0

    def _settling(self, mode: Mode) -> bool:
        """A mode just chosen keeps running for ``SETTLE_STEPS`` drafted steps: one step's
        committed tokens are one sample (Qwen, code at 2k: DFlash2, 1.44x plain when fixed,
        committed 1 token on its first step in auto and was left at once, for good). Its
        plans declining the draft ``IDLE_TRIAL_STEPS`` times ends that early: nothing is
        being tested then. Only a mode's first run in a reply settles: every later one
        costing 3 steps, looks that kept over-promising on prose at 1k sent auto into
        DFlash2 and MTP for 34 of 54 steps (0.62x plain)."""
        state = self.looks.record(mode)
        return (
            state.steps_since_join < SETTLE_STEPS and state.idle_steps_this_reply < IDLE_TRIAL_STEPS
        )

    def _worth_a_trial(self, rates: dict[Mode, LengthPlan], best: Mode) -> Mode | None:
        """While decoding plainly: a drafting mode that has not run in this reply though its
        look comes within ``TRIAL_WITHIN`` of the best rate. A look is a forecast from
        estimates made on other text (a code rewrite that prompt lookup decodes at 2.6x looked
        like 1.8 tokens per step), and only the mode's own steps can correct it. One trial per
        reply and mode, and none away from a drafting mode that is running: it has its own
        steps to go by. Nor one that could not win even were its look ``TRIAL_UPSIDE`` times
        too modest: at 8k of context a look at DFlash2 expecting 1.3 tokens a step at 240 ms
        came within ``TRIAL_WITHIN`` of plain decoding's 7.7 tok/s, and its trial, ~200 ms a
        token, then the way back, cost ~7% of the reply (Qwen, code and prose at 8k)."""
        best_rate = per_s(rates[best])
        open_ = [
            m
            for m, r in rates.items()
            if m is not Mode.AR
            and not self.looks.record(m).ran_this_reply
            and self.looks.record(m).look is not None
            and per_s(r) >= TRIAL_WITHIN * best_rate
            and per_s(upside(r)) > best_rate
        ]
        if not open_:
            return None
        return max(open_, key=lambda m: per_s(rates[m]))


def _reason(
    mode: Mode, rate: LengthPlan, depth: int, other_mode: Mode | None, other: LengthPlan | None
) -> str:
    verified = rate.nodes + 1
    drafted = "" if mode is Mode.AR else f", {verified} token{'s' * (verified != 1)} verified"
    text = (
        f"{mode.label}{drafted}: "
        f"expects {rate.expected_tokens:.1f} tok/step at {rate.predicted_s * 1000:.0f} ms"
    )
    if other is not None and other_mode is not None:
        text += (
            f"; {other_mode.label} {other.expected_tokens:.1f} tok/step "
            f"at {other.predicted_s * 1000:.0f} ms"
        )
    return text + f" (context {depth:,})"
