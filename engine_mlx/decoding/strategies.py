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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import mlx.core as mx

from engine_mlx.decoding.acceptance import walk
from engine_mlx.decoding.ngram import NGramIndex
from engine_mlx.decoding.sampling import Sampler
from engine_mlx.decoding.selector import AcceptanceCalibrator, BlockCandidates, build_tree
from engine_mlx.decoding.tree import CandidateTree
from engine_mlx.models.target import TargetModel
from engine_mlx.stats import StepStats


@dataclass(frozen=True)
class StepOutcome:
    tokens: list[int]
    from_draft: list[bool]
    stats: StepStats


class Strategy(Protocol):
    name: str
    capture_layers: tuple[int, ...]

    def observe_prompt(self, ids: Sequence[int], features: list[mx.array]) -> None:
        """Prompt tokens that went through the target, with the captured layer outputs."""

    def begin(self, first_token: mx.array) -> None:
        """Take over after prefill; ``first_token`` (lazy) came from the prompt's logits."""

    def step(self, limit: int) -> StepOutcome:
        """Commit between 1 and ``limit`` tokens."""


class Autoregressive:
    """One token per step, pipelined like mlx-lm's ``generate_step``: the forward that
    feeds token n is queued (``async_eval``) before token n's value is read on the host, so
    Python overhead overlaps the computation."""

    name = "ar"
    capture_layers: tuple[int, ...] = ()

    def __init__(self, target: TargetModel, cache: list[Any], sampler: Sampler) -> None:
        self.target = target
        self.cache = cache
        self.sampler = sampler
        self._pending: mx.array | None = None

    def observe_prompt(self, ids: Sequence[int], features: list[mx.array]) -> None:
        pass

    def begin(self, first_token: mx.array) -> None:
        self._pending = first_token
        mx.async_eval(first_token)

    def step(self, limit: int) -> StepOutcome:
        token = self._pending
        if token is None:
            raise RuntimeError("begin() was not called")
        if limit > 1:
            logits = self.target.forward(token.reshape(1), self.cache).logits
            self._pending = self.sampler.sample(logits[0, -1])
            mx.async_eval(self._pending)
        else:
            self._pending = None
        return StepOutcome(
            [int(token.item())], [False], StepStats(mode=self.name, committed=1, width=1)
        )


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
        lookup: bool = True,
    ) -> None:
        self.name = name
        self.target, self.cache, self.sampler = target, cache, sampler
        self.calibrator = calibrator
        self.drafter = drafter
        self.width = 1 if target.is_hybrid else max(1, width)
        self.block_size = block_size
        self.lookup = NGramIndex() if lookup else None
        self.capture_layers = drafter.capture_layers if drafter else ()
        self._root: mx.array | None = None
        self._first = True

    def observe_prompt(self, ids: Sequence[int], features: list[mx.array]) -> None:
        if self.lookup is not None:
            self.lookup.extend(list(ids))
        if self.drafter is not None:
            self.drafter.observe(ids, features)

    def begin(self, first_token: mx.array) -> None:
        self._root = first_token
        self._first = True

    def step(self, limit: int) -> StepOutcome:
        if self._root is None:
            raise RuntimeError("begin() was not called")
        root = int(self._root.item())
        if self._first:  # the prefill forward's token
            self._first = False
            if self.lookup is not None:
                self.lookup.extend([root])
            return StepOutcome([root], [False], StepStats(mode=self.name, committed=1, width=1))
        t0 = time.perf_counter()
        tree = self.propose(root, max_depth=min(self.block_size - 1, limit - 1))
        t1 = time.perf_counter()
        prefix = self.target.cache_length(self.cache)
        snap = self.target.snapshot(self.cache) if self.target.is_hybrid else None
        out = self.target.forward(
            mx.array(tree.tokens),
            self.cache,
            positions=tree.positions(prefix),
            mask=tree.attention_mask(prefix),
            capture=self.capture_layers,
        )
        choice = self.sampler.sample(out.logits[0]).tolist()
        t2 = time.perf_counter()
        result = walk(tree, choice)
        keep = [0, *result.path]
        self._commit(tree, keep, prefix, snap)
        committed_ids = [tree.tokens[i] for i in keep]
        if self.drafter is not None:
            idx = mx.array(keep)
            self.drafter.observe(committed_ids, [f[:, idx] for f in out.features])
        if self.lookup is not None:
            self.lookup.extend(result.tokens)
        self.calibrator.observe(tree, result)
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
        )
        return StepOutcome(result.tokens, [True] * result.accepted + [False], stats)

    def propose(self, root: int, max_depth: int) -> CandidateTree:
        if max_depth <= 0:
            return CandidateTree.rooted(root)
        block = None
        if self.drafter is not None:
            block = self.drafter.propose(root, max_depth, top_k=self.width)
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
