"""Decoding strategies behind one small protocol.

A strategy turns the target's state into committed tokens, one step (one target forward) at a
time. Autoregressive decoding is the degenerate case: no draft, one token per step.
Speculative decoding drafts a candidate tree, verifies it in one forward and commits the
accepted path plus the target's bonus token. In both, the target's cache holds exactly the
committed tokens except the newest one (the root of the next step), which the next forward
feeds.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx

from engine_mlx.decoding.acceptance import accept, replay
from engine_mlx.decoding.ngram import NGramIndex
from engine_mlx.decoding.sampling import Sampler
from engine_mlx.decoding.selector import AcceptanceCalibrator, BlockCandidates, build_tree
from engine_mlx.decoding.tree import CandidateTree
from engine_mlx.models.target import TargetModel
from engine_mlx.modes import Mode
from engine_mlx.stats import StepStats


@dataclass(frozen=True)
class LengthPlan:
    """How many draft nodes a step verifies, and what that was expected to bring."""

    nodes: int
    expected_tokens: float
    predicted_s: float


# (mode, node scores best-first, draft seconds, context depth, the nodes' depths in the tree)
# -> the plan; the auto policy's ``plan_length``.
LengthPlanner = Callable[[str, Sequence[float], float, int, Sequence[int]], LengthPlan]


@dataclass(frozen=True)
class StepOutcome:
    tokens: list[int]
    from_draft: list[bool]
    stats: StepStats
    # The whole draft when a plan verified only part of it: what the rest would have been
    # worth is known once the text after it is (``acceptance.replay``).
    proposed: CandidateTree | None = None


class Strategy(Protocol):
    """Every strategy keeps a root: the newest committed token, not yet in the cache."""

    name: str

    def begin(self, first_token: mx.array) -> None:
        """Take over after prefill; the first step commits ``first_token`` (lazy, from the
        prompt's logits)."""

    def resume(self, root: int) -> None:
        """Take over mid-generation from another strategy; ``root`` is already committed."""

    def release(self) -> int:
        """Hand over: undo any queued work on the cache and return the root."""

    def peek_root(self) -> int:
        """The root, without handing over (waits for a queued step's token)."""

    def step(self, limit: int) -> StepOutcome:
        """Commit between 1 and ``limit`` tokens."""


class Autoregressive:
    """One token per step, pipelined like mlx-lm's ``generate_step``: the forward that feeds
    the root is queued (``async_eval``) before the previous token's value is read on the host,
    so Python overhead overlaps the computation. A queued forward has already appended the
    root to the cache; ``release`` rolls that back (snapshot) so another strategy can take
    over. ``on_features`` receives the captured layers of every root that was fed (the idle
    drafter's catch-up material)."""

    name = Mode.AR

    def __init__(
        self,
        target: TargetModel,
        cache: list[Any],
        sampler: Sampler,
        *,
        capture: tuple[int, ...] = (),
        on_features: Callable[[list[int], list[mx.array], None], None] | None = None,
    ) -> None:
        self.target = target
        self.cache = cache
        self.sampler = sampler
        self.capture = capture
        self.on_features = on_features
        self._root: mx.array | None = None
        self._first = False
        self._queued: tuple[mx.array, Any, list[mx.array]] | None = None
        # Whether the root is in the sampler's context already: one handed over by another
        # strategy was committed (and remembered) by it; this strategy's own roots are
        # remembered only once the step that read them returns.
        self._root_remembered = False

    def begin(self, first_token: mx.array) -> None:
        self._root, self._first, self._queued = first_token, True, None
        self._root_remembered = False
        mx.async_eval(first_token)

    def resume(self, root: int) -> None:
        self._root, self._first, self._queued = mx.array(root), False, None
        self._root_remembered = True

    def release(self) -> int:
        if self._queued is not None:
            self.target.restore(self.cache, self._queued[1])
            self._queued = None
        if self._root is None:
            raise RuntimeError("nothing to hand over")
        return int(self._root.item())

    def peek_root(self) -> int:
        if self._root is None:
            raise RuntimeError("begin() was not called")
        return int(self._root.item())

    def _queue(self) -> None:
        snap = self.target.snapshot(self.cache)
        out = self.target.forward(self._root.reshape(1), self.cache, capture=self.capture)
        # The root is committed by the step that queues this, after it: not remembered yet.
        # A forcing rule reads it on the host (a thinking budget costs the pipeline a sync).
        rows = None
        if self.sampler.forcing is not None:
            rows = [[] if self._root_remembered else [int(self._root.item())]]
        nxt = self.sampler.sample(out.logits[0, -1], extra=self._root.reshape(1), rows=rows)
        mx.async_eval(nxt)
        self._queued = (nxt, snap, out.features)

    @property
    def queued_ahead(self) -> bool:
        """A forward is queued whose token no step has read yet."""
        return self._queued is not None

    def step(self, limit: int, queue_next: bool = True) -> StepOutcome:
        """``queue_next=False``: the last step before handing over, which reads the queued
        forward and queues none; ``release`` would throw that forward away, and on the CPU
        at depth (numpy attention, evaluated as it is built) it is a whole forward already
        paid for: Qwen's suite had 5-10 switches a 64-token reply, at ~110 ms each."""
        if self._root is None:
            raise RuntimeError("begin() was not called")
        if self._first:
            self._first = False
            token = int(self._root.item())
        else:
            if self._queued is None:
                self._queue()
            nxt, _, features = self._queued
            self._queued = None
            token = int(nxt.item())
            if self.on_features is not None:
                self.on_features([int(self._root.item())], features, None)
            self._root, self._root_remembered = nxt, False
        if limit > 1 and queue_next:
            self._queue()
        return StepOutcome([token], [False], StepStats(mode=self.name, committed=1, width=1))


class Drafter(Protocol):
    """A model that proposes per-position candidates for the next block."""

    capture_layers: tuple[int, ...]
    block_size: int

    def observe(self, ids: Sequence[int], features: list[mx.array]) -> None:
        """Committed tokens (that went through the target) and their captured features."""

    def propose(self, root: int, depth: int, top_k: int) -> BlockCandidates:
        """Candidates for the ``depth`` positions after ``root``."""

    def reset(self) -> None:
        """Forget the context (a new generation starts)."""

    def defer(self, ids: Sequence[int], features: list[mx.array]) -> None:
        """A token fed to the target while another mode decodes, with its features."""

    def catch_up(self) -> None:
        """Process the deferred tokens now (evaluated), so that a draft's time is drafting."""


class Speculative:
    """Draft a candidate tree, verify it in one target forward, commit the accepted path.

    Candidates come from an optional drafter (DFlash2) and from prompt lookup; the selector
    spends the verification budget on the candidates most likely to pass. Hybrid targets
    (recurrent layers) verify a single chain and roll back by snapshot and replay.
    """

    def __init__(
        self,
        name: str,
        target: TargetModel,
        cache: list[Any],
        sampler: Sampler,
        calibrator: AcceptanceCalibrator,
        *,
        drafter: Drafter | None = None,
        width: int = 1,
        block_size: int = 8,
        lookup: NGramIndex | None = None,
        capture: tuple[int, ...] | None = None,
        feed: Callable[[list[int], list[mx.array], Drafter | None], None] | None = None,
        planner: LengthPlanner | None = None,
    ) -> None:
        self.name = name
        self.planner = planner  # auto mode: verify only the nodes worth their cost
        self.target, self.cache, self.sampler = target, cache, sampler
        self.calibrator = calibrator
        self.drafter = drafter
        self.width = 1 if target.is_hybrid else max(1, width)
        self.block_size = block_size
        self.lookup = lookup  # shared with the session, which feeds it every committed token
        # What the verify forward captures, and who gets it: by default this drafter alone;
        # in auto mode the session's feed also hands it to idle drafters.
        self.capture_layers = (
            capture if capture is not None else (drafter.capture_layers if drafter else ())
        )
        self.feed = feed
        self._root: mx.array | None = None
        self._first = True
        self._looked: CandidateTree | None = None  # the last preview, until it is judged

    def begin(self, first_token: mx.array) -> None:
        self._root = first_token
        self._first = True

    def resume(self, root: int) -> None:
        self._root, self._first = mx.array(root), False

    def release(self) -> int:
        if self._root is None:
            raise RuntimeError("nothing to hand over")
        return int(self._root.item())

    def peek_root(self) -> int:
        return self.release()

    def preview(self, root: int) -> tuple[list[float], list[int], float]:
        """Draft after ``root`` without verifying: the nodes' scores, best first, their depths
        in the tree, and the seconds drafting took (the auto policy's look at a mode that is
        not running)."""
        if self.drafter is not None:  # once per switch, not per draft: a look after 17 plain
            self.drafter.catch_up()  # steps took 50 ms where an MTP draft takes 10
        elif self.lookup is None or not self.lookup.continuations(1, 1):
            self._looked = None  # prompt lookup alone, nothing to propose: most chat steps
            return [], [], 0.0
        t0 = time.perf_counter()
        tree = self.propose(root, max_depth=self.block_size - 1)
        self._looked = tree
        return tree.scores[1:], tree.depths[1:], time.perf_counter() - t0

    def lookup_scores(self, root: int) -> list[float]:
        """The scores of what prompt lookup alone proposes after ``root``, best first ([]
        without lookup or a match): free to compute, so the auto policy can ask every step
        whether the context is being repeated, where a look at this mode would pay."""
        if self.lookup is None:
            return []
        paths = self.lookup.continuations(self.block_size - 1, self.width)
        if not paths:
            return []
        tree = build_tree(
            root,
            self.calibrator,
            width=self.width,
            max_depth=self.block_size - 1,
            ngram_paths=paths,
            block_source=self.name,
        )
        return tree.scores[1:]

    def judge_preview(self, committed: list[int]) -> bool:
        """Count the last preview as if it had been verified, once ``committed`` (the tokens
        after its root, from whichever mode ran) decide its walk; True when it is judged (or
        there is none). A mode that is not running learns on the text being written: a look
        at a code rewrite, which prompt lookup decodes at 2.6x, otherwise carried estimates
        learned on the math reply before it."""
        if self._looked is None:
            return True
        result = replay(self._looked, committed)
        if result is None:
            return False
        self.calibrator.observe(self._looked, result)
        self._looked = None
        return True

    def step(self, limit: int) -> StepOutcome:
        if self._root is None:
            raise RuntimeError("begin() was not called")
        root = int(self._root.item())
        if self._first:  # the prefill forward's token
            self._first = False
            return StepOutcome([root], [False], StepStats(mode=self.name, committed=1, width=1))
        if self.drafter is not None:
            self.drafter.catch_up()
        t0 = time.perf_counter()
        # The whole block, as the drafter was trained and as llama.cpp drafts it, then cut to
        # what the reply has left: a shorter block (bidirectional inside) drafts otherwise.
        tree = self.propose(root, max_depth=self.block_size - 1).within_depth(limit - 1)
        t1 = time.perf_counter()
        prefix = self.target.cache_length(self.cache)
        plan, proposed = None, tree
        if self.planner is not None:
            plan = self.planner(self.name, tree.scores[1:], t1 - t0, prefix, tree.depths[1:])
            tree = tree.truncated(plan.nodes)
        snap = self.target.snapshot(self.cache) if self.target.is_hybrid else None
        out = self.target.forward(
            mx.array(tree.tokens),
            self.cache,
            positions=tree.positions(prefix),
            mask=tree.attention_mask(prefix),
            capture=self.capture_layers,
            tree=mx.array(tree.ancestor_mask()),
        )
        result = accept(tree, out.logits[0], self.sampler)
        t2 = time.perf_counter()
        keep = [0, *result.path]
        self._commit(tree, keep, prefix, snap)
        committed_ids = [tree.tokens[i] for i in keep]
        if self.feed is not None or self.drafter is not None:
            idx = mx.array(keep)
            feats = [f[:, idx] for f in out.features]
            if self.feed is not None:
                self.feed(committed_ids, feats, self.drafter)
            elif self.drafter is not None:
                self.drafter.observe(committed_ids, feats)
        self.calibrator.observe(tree, result, proposed)
        self._root = mx.array(result.bonus)
        t3 = time.perf_counter()
        stats = StepStats(
            mode=self.name,
            committed=len(result.tokens),
            drafted=len(tree) - 1,
            tested=result.tested,
            accepted=result.accepted,
            width=tree.width,
            draft_s=t1 - t0,
            verify_s=t2 - t1,
            commit_s=t3 - t2,
            predicted_tokens=plan.expected_tokens if plan else 0.0,
            predicted_s=plan.predicted_s if plan else 0.0,
        )
        planned = proposed if plan is not None and len(proposed) > 1 else None
        return StepOutcome(result.tokens, [True] * result.accepted + [False], stats, planned)

    def propose(self, root: int, max_depth: int) -> CandidateTree:
        if max_depth <= 0:
            return CandidateTree.rooted(root)
        block = None
        if self.drafter is not None:
            block = self.drafter.propose(root, max_depth, top_k=self.width)
            block = self.calibrator.block_estimates(self.name, block)
        paths = self.lookup.continuations(max_depth, self.width) if self.lookup else None
        return build_tree(
            root,
            self.calibrator,
            width=self.width,
            max_depth=max_depth,
            block=block,
            ngram_paths=paths,
            block_source=self.name,
        )

    def _commit(self, tree: CandidateTree, keep: list[int], prefix: int, snap: Any) -> None:
        """Leave exactly root + accepted path in the cache."""
        if snap is None:
            self.target.compact(self.cache, prefix, keep)
        elif len(keep) < len(tree):  # recurrent state advanced past a rejection: replay
            self.target.restore(self.cache, snap)
            self.target.forward(mx.array([tree.tokens[i] for i in keep]), self.cache)
