"""An MTP head bound to a target: drafts a chain of tokens from the target's last hidden state.

The head's layer keeps a KV cache with one entry per committed token pair (hidden of token i,
token i+1), filled as tokens are committed; a proposal appends the chain's entries, then trims
them off again. ``hidden`` selects which target state feeds the head: after the final norm
(``"post"``) or before it (``"pre"``). By default it is the one the head was trained on where
its file records it (FlashChat's trainer does), else ``"post"`` as vLLM feeds Qwen3-Next and
DeepSeek MTP heads (no real Qwen3.5 checkpoint was at hand to measure a built-in head).

Measured for heads FlashChat trains (SmolLM2-135M-Instruct, two heads trained identically:
same data, seed and 300 steps; greedy decoding of the benchmark's six math/code/prose prompts
at depths 0 and 1024, 64 tokens each): pre-norm mean tau 1.39 (training KL 3.09, top-1
agreement 34.8%), post-norm 1.36 (3.15, 34.3%). Pre wins, narrowly (a margin one more seed
could flip), so training defaults to "pre" and the shipped head reads the pre-norm state.

A head whose file carries a draft vocabulary proposes from it (``decoding.draft_vocab``): each
draft step otherwise runs the target's whole head, which for Qwen2.5-0.5B (151,936 rows of
896) costs ~8x the head's own layer.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache

from engine_mlx.decoding.draft_vocab import DraftVocabulary
from engine_mlx.decoding.selector import BlockCandidates
from engine_mlx.models.mtp import MTPHead
from engine_mlx.models.target import TargetModel
from engine_mlx.modes import DEFAULT_MTP_STEPS
from engine_mlx.prompt_cache import kv_until_offset


class MTPDrafter:
    """Implements the ``Drafter`` protocol of ``decoding.strategies``."""

    def __init__(
        self,
        head: MTPHead,
        target: TargetModel,
        steps: int | None = None,
        hidden: str | None = None,
    ) -> None:
        """``steps`` None: the length the head's file recommends, else ``DEFAULT_MTP_STEPS``."""
        hidden = hidden or head.reads or "post"
        if hidden not in ("pre", "post"):
            raise ValueError("hidden must be 'pre' or 'post'")
        self.head, self.target, self.hidden = head, target, hidden
        self.block_size = (steps or head.draft_steps or DEFAULT_MTP_STEPS) + 1
        self.capture_layers = (len(target.layers) - 1,)
        self.vocab = DraftVocabulary.for_target(target, head.draft_vocab)
        self.reset()

    def reset(self) -> None:
        if self.vocab is not None:
            self.vocab.clear_context()
        self._cache = KVCache()
        self._pending: mx.array | None = None  # hidden of the newest fed token, [1, 1, H]
        self._deferred: list[tuple[list[int], list[mx.array]]] = []  # fed while idle

    def _state(self, features: list[mx.array]) -> mx.array:
        h = features[0]
        return self.target.inner.norm(h) if self.hidden == "post" else h

    def observe(self, ids: Sequence[int], features: list[mx.array]) -> None:
        """Tokens that went through the target with their hiddens: pair each hidden with the
        token after it and append those pairs to the head's cache."""
        if not ids:
            return
        self.catch_up()
        self._append(list(ids), features)
        if self.vocab is not None:
            self.vocab.add(ids)

    def catch_up(self) -> None:
        """The tokens fed while another mode decoded, through the head in one pass, and the
        head's context evaluated: built lazily from the prompt's chunks, it made a reply's
        first MTP draft at 4k of context take 190 ms where a draft takes 12 (auto priced
        its look at MTP by that, and decoded plainly where fixed MTP ran 1.14-1.44x)."""
        if self._deferred:
            ids = [t for chunk, _ in self._deferred for t in chunk]
            features = [
                mx.concatenate(parts, axis=1)
                for parts in zip(*(f for _, f in self._deferred), strict=True)
            ]
            self._deferred = []
            self._append(ids, features)
        if self._pending is not None:
            mx.eval(self._cache.state if self._cache.offset else [], self._pending)

    def context_state(self) -> object:
        """The head's evaluated context, for a kept prefill (``prompt_cache``): restored, the
        next reply on that prompt skips running the head over it again."""
        self.catch_up()
        layers = kv_until_offset(self._cache) if self._cache.offset else None
        vocab = self.vocab.context_state() if self.vocab is not None else None
        return layers, self._pending, vocab

    def restore_context(self, state: object) -> None:
        """The context as ``context_state`` kept it (after ``reset``)."""
        layers, pending, vocab = state  # type: ignore[misc]
        self.reset()
        if layers is not None:
            self._cache.state = layers
        self._pending = pending
        if vocab is not None and self.vocab is not None:
            self.vocab.restore_context(vocab)

    def _append(self, ids: list[int], features: list[mx.array]) -> None:
        h = self._state(features)
        tokens = mx.array(list(ids))[None]
        if self._pending is not None:
            hiddens = mx.concatenate([self._pending, h[:, :-1]], axis=1)
            nexts = tokens
        else:
            hiddens, nexts = h[:, :-1], tokens[:, 1:]
        if nexts.shape[1]:
            self.head.step(self.target.embed(nexts), hiddens, self._cache)
        self._pending = h[:, -1:]

    def defer(self, ids: Sequence[int], features: list[mx.array]) -> None:
        """Kept for ``catch_up``: running the head on every token of another mode's steps
        made auto mode's plain steps ~10% slower than plain decoding's."""
        if ids:
            self._deferred.append((list(ids), features))
            if self.vocab is not None:
                self.vocab.add(ids)

    def _logits(self, hidden: mx.array) -> mx.array:
        """Logits of the head's newest position, over the draft vocabulary where there is one."""
        normed = self.head.norm(hidden)[0, -1]
        logits = self.target.head(normed) if self.vocab is None else self.vocab.logits(normed)
        return logits.astype(mx.float32)

    def propose(self, root: int, depth: int, top_k: int) -> BlockCandidates:
        self.catch_up()
        if self._pending is None:
            raise RuntimeError("the MTP head has no context yet: observe the prompt first")
        offset = self._cache.offset
        token = mx.array([[root]])
        hidden = self._pending
        columns = None if self.vocab is None else mx.array(self.vocab.ids)
        tokens, probs = [], []
        for _ in range(depth):
            hidden = self.head.step(self.target.embed(token), hidden, self._cache)
            p = mx.softmax(self._logits(hidden))
            k = max(1, min(top_k, p.shape[-1]))
            top = mx.argpartition(-p, kth=k - 1)[:k]
            top = top[mx.argsort(-p[top])]
            probs.append(p[top])
            if columns is not None:
                top = columns[top]
            tokens.append(top)
            token = top[:1][None]
        self._cache.trim(self._cache.offset - offset)
        tok, pr = mx.stack(tokens), mx.stack(probs)
        mx.eval(tok, pr)
        return BlockCandidates(np.array(tok), np.array(pr))
