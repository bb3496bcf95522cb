"""What auto mode's expected-rate policy knows about one drafting mode: kept across replies,
refreshed by every step (its plans' expectations against what it committed, the times of its
parts, its latest look), and how much of it a new reply keeps."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from statistics import median

from engine_mlx.decoding.strategies import LengthPlan

HONESTY_PRIOR = 3.0  # drafted tokens of evidence at face value every honesty estimate starts from
NEW_REPLY_MEMORY = 0.5  # share of a mode's honesty evidence that a new reply keeps
RECENT_TIMINGS = 7  # a mode's draft and overhead times are the median of this many steps
SETTLE_STEPS = 3  # drafted steps a newly joined mode runs before its own rate can send it away


@dataclass
class Timing:
    """The median of a mode's last few timings of one part of a step. A mean is pulled by
    the odd step a page fault or the collector made 200 ms slower: smoothed at 0.3, one such
    step added 60 ms to every later MTP step's predicted cost, which sent auto from MTP (1.22x
    plain on that text) to plain decoding for 25 steps (Qwen, code at depth 1k)."""

    samples: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_TIMINGS))

    @property
    def known(self) -> bool:
        return bool(self.samples)

    @property
    def seconds(self) -> float:
        return median(self.samples) if self.samples else 0.0

    def add(self, seconds: float) -> None:
        self.samples.append(seconds)


@dataclass
class ModeRecord:
    """What one drafting mode has shown: kept across replies, refreshed by every step."""

    expected: float | None = None  # tokens per step its plans expected when it ran
    realised: float | None = None  # tokens per step it committed when it ran
    # Tokens per verify forward when it ran (root included; None until its first plan since
    # it was chosen), priced as such: rounded, MTP's 1.5 tokens a step (plans verifying its
    # draft or declining it) were priced as one, then two, and its rate jumped by 20% from
    # one step to the next.
    verified: float | None = None
    draft: Timing = field(default_factory=Timing)  # seconds per proposal
    rest: Timing = field(default_factory=Timing)  # beside draft and forward: acceptance, ...
    look: LengthPlan | None = None  # what its latest looks promised (smoothed)
    look_pace: float = 1.0  # the machine's pace (``StepCosts.pace``) when ``look`` was priced
    # Seconds one look takes (a draft: grows with the context), the median of the last few:
    # smoothed, a reply's first look at depth 47 (81 ms, the drafter's first draft) against
    # 13 for the next ones stretched the looks' budget interval to 30 steps, and auto decoded
    # a code reply in MTP for 16 steps where DFlash2 committed 4-7 tokens a step.
    look_time: Timing = field(default_factory=Timing)
    # Seconds a look really took, the drafter's catch-up on the tokens it missed included:
    # what the looks' budget spends (``look_time`` prices the draft itself).
    look_cost: Timing = field(default_factory=Timing)
    # Whether its latest look (or run) came near the bar: a new reply looks at a mode at once
    # only then; kept on disk with the rest of what a new process starts from (``memory``).
    near: bool = True
    # Drafted tokens committed and drafted tokens its plans expected, decayed sums over its
    # recent steps (``honesty``): the selector's estimates are calibrated per draft position,
    # not per text or depth, so a look is scaled by how honest they were when the mode ran.
    # Each draft counts whole, judged by the text once written (``observe_drafts``), not by
    # the part its plan verified: that part cannot show what the rest was worth.
    committed_extra: float = 0.0
    expected_extra: float = 0.0
    raw_expected: float | None = None  # the latest plan's tokens by its unscaled scores
    last_look: int = -(10**9)  # policy step of its last look or step
    look_every: int = 4
    ran_this_reply: bool = False
    fresh_look_due: bool = False  # a new reply: look at it before its first step, running or not
    idle_steps_this_reply: int = 0  # its steps in this reply whose plans verified no draft
    steps_since_join: int = 0  # its steps that verified a draft since it was last chosen
    defeats: int = 0  # times it ran behind plain decoding and was left (one forgiven a reply)

    @property
    def honesty(self) -> float:
        """Committed per expected drafted token: a ratio of sums, not a mean of per-step
        ratios (a step that expected 0.6 extra tokens and got none is not a verdict), pulled
        toward 1 by ``HONESTY_PRIOR`` tokens of evidence. Over a whole suite the selector's
        estimates are honest (Qwen, 116 drafted steps: 298.7 tokens expected, 296
        committed), so one step is weak evidence against them: with a prior of one token, a
        first step that expected 2.2 and committed 1 halved the next plans' scores, they
        declined three drafts, and the trial of DFlash2 was used up on text where it ran at
        1.23x plain (prose at depth 0; auto 0.93x)."""
        return (self.committed_extra + HONESTY_PRIOR) / (self.expected_extra + HONESTY_PRIOR)

    def new_reply(self, fresh_look: bool = False) -> None:
        """New text: what the estimates were worth on the last one counts for less. (Kept
        whole, a drafter's over-promise on math, honesty 0.24, scaled its look at a code reply
        it would have decoded at 2.6x down below plain decoding, so auto never tried it.)"""
        self.committed_extra *= NEW_REPLY_MEMORY
        self.expected_extra *= NEW_REPLY_MEMORY
        self.ran_this_reply = False
        self.idle_steps_this_reply = 0
        # One defeat forgiven per new text, not all: reset to none, MTP and DFlash2 were
        # joined on a promising look and lost to plain decoding at every reply's start on
        # the Qwen demo's chat (2-7 of their steps a reply, ~1-2% of its time).
        self.defeats = max(0, self.defeats - 1)
        # What it committed on the last text is no rate for this one: until its first step
        # here, a mode is rated by its look at this text (``fresh_look_due``). Nor does the
        # reply's first mode settle: it was chosen on the last text's looks.
        self.realised = self.expected = self.verified = None
        self.steps_since_join = SETTLE_STEPS
        self.fresh_look_due = self.near or fresh_look
