"""A DFlash model bound to a target: its context cache, and the candidates it proposes.

The drafter's context is the target's captured layer outputs for committed tokens; each
layer's keys/values of that context are projected once, when the tokens are committed, and
kept. A proposal embeds ``[root, MASK, ..., MASK]`` with the target's embedding, runs the
block through the drafter, decodes it with the target's head, and returns the top-k tokens
and their probabilities per masked position.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache

from engine_mlx.decoding.draft_vocab import DraftVocabulary
from engine_mlx.decoding.selector import BlockCandidates
from engine_mlx.kernels import candidates
from engine_mlx.kernels.launch import live_executor, record
from engine_mlx.models import attention
from engine_mlx.models.dflash import DFlashConfig, DFlashModel, DrafterMismatchError
from engine_mlx.models.dflash2 import Lattice, output_transform, top_candidates
from engine_mlx.models.loading import ModelSpec
from engine_mlx.models.target import TargetModel
from engine_mlx.prompt_cache import kv_until_offset

MASK_TOKEN = "<|MASK|>"


def resolve_mask_token(model: DFlashModel, target: TargetModel) -> int:
    """The config's mask id, else ``<|MASK|>`` in the target's tokenizer, else the first id
    past the tokenizer's vocabulary (where z-lab's older drafts put it), if the embedding has
    a row for it."""
    cfg = model.config
    if cfg.mask_token_id is not None:
        return int(cfg.mask_token_id)
    vocab = target.tokenizer.get_vocab() if hasattr(target.tokenizer, "get_vocab") else {}
    if MASK_TOKEN in vocab:
        return int(vocab[MASK_TOKEN])
    next_id = len(vocab)
    if 0 < next_id < target.spec.vocab_size:
        return next_id
    raise DrafterMismatchError(
        f"The drafter has no dflash_config.mask_token_id and the target's tokenizer has no "
        f"{MASK_TOKEN} token (nor a spare embedding row for one)."
    )


def fit_problems(cfg: DFlashConfig, spec: ModelSpec) -> list[str]:
    """Why a drafter with config ``cfg`` cannot serve the target ``spec`` ([] when it can).

    Configs alone decide it, so the model library can show a pairing's status without
    loading weights."""
    problems = []
    if cfg.hidden_size != spec.hidden_size:
        problems.append(f"drafter hidden size {cfg.hidden_size}, target {spec.hidden_size}")
    if cfg.vocab_size != spec.vocab_size:
        problems.append(f"drafter vocabulary {cfg.vocab_size}, target {spec.vocab_size}")
    bad = [i for i in cfg.target_layer_ids if not 0 <= i < spec.num_layers]
    if bad:
        problems.append(
            f"drafter reads target layers {bad}, target has layers 0..{spec.num_layers - 1}"
        )
    return problems


def check_fits(model: DFlashModel, target: TargetModel) -> None:
    """Refuse a drafter built for another target, naming the mismatch."""
    problems = fit_problems(model.config, target.spec)
    if problems:
        raise DrafterMismatchError(
            f"This drafter does not fit {target.spec.name}: " + "; ".join(problems) + "."
        )


class DFlashDrafter:
    """Implements the ``Drafter`` protocol of ``decoding.strategies``. ``vocab`` restricts
    proposals to a subset of tokens (``decoding.draft_vocab``); None proposes from all."""

    def __init__(
        self, model: DFlashModel, target: TargetModel, vocab: np.ndarray | None = None
    ) -> None:
        check_fits(model, target)
        if model.fc.weight.dtype != target.dtype:
            model.set_dtype(target.dtype)  # stored fp16/bf16; computed like the target
        self.model = model
        self.target = target
        self.mask_id = resolve_mask_token(model, target)
        self.capture_layers = tuple(model.config.target_layer_ids)
        self.block_size = model.config.block_size
        self._cache: list[KVCache] = []
        self._pending: list[list[mx.array]] = []  # features committed while idle
        self.vocab = DraftVocabulary.for_target(target, vocab)
        # llama.cpp's --spec-draft-n-min / --spec-draft-p-min (a selector's walk only)
        self.n_min, self.p_min = 0, 0.0
        self.reset()

    @property
    def context_length(self) -> int:
        return self._cache[0].offset

    def reset(self) -> None:
        self._cache = [KVCache() for _ in self.model.layers]
        self._pending = []
        if self.vocab is not None:
            self.vocab.clear_context()

    def defer(self, ids: Sequence[int], features: list[mx.array]) -> None:
        """Keep features of tokens committed while another mode decodes (cheap: no drafter
        work); ``catch_up`` projects them all in one pass when the drafter is needed."""
        self._pending.append(features)
        if self.vocab is not None:
            self.vocab.add(ids)

    def catch_up(self) -> None:
        """Project the deferred features, and evaluate the context's keys and values: those
        of the prompt are built lazily, and the first draft after a 4k-token prompt took
        421 ms of projecting where a draft takes 30 (auto timed it as the look's cost and
        then looked at DFlash2 once in 200 steps)."""
        if self._pending:
            joined = [mx.concatenate(p, axis=1) for p in zip(*self._pending, strict=True)]
            self._pending = []
            self._project(joined)
        if self.context_length:
            mx.eval([c.state for c in self._cache])

    def context_state(self) -> object:
        """The evaluated context, for a kept prefill (``prompt_cache``): restored, the next
        reply on that prompt skips projecting it again, which took ~420 ms at a 4k-token
        prompt of the Qwen demo, in every reply's first DFlash2 draft or look."""
        self.catch_up()
        layers = [kv_until_offset(c) for c in self._cache] if self.context_length else None
        return layers, self.vocab.context_state() if self.vocab is not None else None

    def restore_context(self, state: object) -> None:
        """The context as ``context_state`` kept it (after ``reset``)."""
        layers, vocab = state  # type: ignore[misc]
        self.reset()
        for cache, kept in zip(self._cache, layers, strict=True) if layers is not None else ():
            cache.state = kept
        if vocab is not None and self.vocab is not None:
            self.vocab.restore_context(vocab)

    def observe(self, ids: Sequence[int], features: list[mx.array]) -> None:
        if not ids:
            return
        self.catch_up()
        self._project(features)
        if self.vocab is not None:
            self.vocab.add(ids)

    def _project(self, features: list[mx.array]) -> None:
        ctx = self.model.project_context(features)
        offset = self.context_length
        for layer, cache in zip(self.model.layers, self._cache, strict=True):
            k, v = layer.self_attn.context_kv(ctx, self.model.rope, offset)
            cache.update_and_fetch(k, v)

    def block_hidden(self, root: int, depth: int) -> mx.array:
        """The drafter's final-normed states [depth, H] of the masked positions after
        ``root``."""
        self.catch_up()
        block = mx.array([[root] + [self.mask_id] * depth])
        if self.context_length == 0:
            raise RuntimeError("the drafter has no context yet: observe the prompt first")
        ctx_kv = [(c.keys[..., : c.offset, :], c.values[..., : c.offset, :]) for c in self._cache]
        with attention.active():  # the numpy softmax at depth (``models.attention.attend``)
            return self.model(self.target.embed(block), ctx_kv, self.context_length)[0, 1:]

    def block_logits(self, root: int, depth: int, hidden: mx.array | None = None) -> mx.array:
        """Logits [depth, vocab] for the masked positions after ``root`` (over the draft
        vocabulary's columns when there is one), with the drafter's output transforms."""
        hidden = self.block_hidden(root, depth) if hidden is None else hidden
        logits = self.vocab.logits(hidden) if self.vocab is not None else self.target.head(hidden)
        cfg = self.model.config
        return output_transform(logits, cfg.output_multiplier, cfg.final_logit_softcapping)

    def lattice(self, root: int, depth: int) -> Lattice:
        """The selector's candidates and scores for the ``depth`` positions after ``root``
        (a drafter with a candidate selector: llama.cpp's DFlash2)."""
        hidden = self.block_hidden(root, depth)
        logits = np.array(self.block_logits(root, depth, hidden).astype(mx.float32))
        columns = top_candidates(logits, self.model.config.selector_top_k)
        ids = self.vocab.ids[columns] if self.vocab is not None else columns
        unary = np.take_along_axis(logits, columns, axis=-1)
        scores = self.model.candidate_selector.scores(
            root, mx.array(ids), mx.array(unary), hidden.astype(mx.float32)
        )
        return Lattice(ids.astype(np.int64), np.array(scores.astype(mx.float32)))

    def _propose_from_lattice(self, root: int, depth: int) -> BlockCandidates:
        """The selector's walk (``p_min`` may end it early; shorter than ``n_min``, there is
        no draft), with every candidate's transition probabilities for wider trees."""
        lattice = self.lattice(root, depth)
        walk = lattice.walk_indices(self.n_min, self.p_min)
        if not walk:
            return BlockCandidates(np.zeros((0, 1), np.int64), np.zeros((0, 1), np.float32))
        n = len(walk)
        transitions = lattice.transitions()[:n]
        previous = [0, *walk[:-1]]
        probs = transitions[np.arange(n), previous]
        return BlockCandidates(lattice.candidates[:n], probs, transitions=transitions)

    def propose(self, root: int, depth: int, top_k: int) -> BlockCandidates:
        """Top-k tokens and probabilities per position: on the device where kernels run
        (``kernels.candidates.topk``), else in numpy: MLX's CPU softmax evaluates ``exp``
        element by element (~17 ns each, 344k of them for 7 positions of a 49k vocabulary),
        numpy's is vectorised (~1 ns)."""
        if self.model.config.reference_dflash2:
            return self._propose_from_lattice(root, depth)
        block_logits = self.block_logits(root, depth)
        if live_executor() is not None:  # a GPU backend (or the emulator): top-k on the device
            ids, probs_mx = candidates.topk(block_logits, top_k)
            tokens, chosen = np.array(ids), np.array(probs_mx)
            if self.vocab is not None:
                tokens = self.vocab.ids[tokens]
            return BlockCandidates(tokens, chosen)
        record("candidate_topk", kernel=False)
        logits = np.array(block_logits.astype(mx.float32))
        k = max(1, min(top_k, logits.shape[-1]))
        top = np.argpartition(-logits, kth=k - 1, axis=-1)[:, :k]
        peak = logits.max(axis=-1, keepdims=True)
        log_norm = peak + np.log(np.exp(logits - peak).sum(axis=-1, keepdims=True))
        probs = np.exp(np.take_along_axis(logits, top, axis=-1) - log_norm)
        order = np.argsort(-probs, axis=-1, kind="stable")
        tokens = np.take_along_axis(top, order, axis=-1)
        if self.vocab is not None:
            tokens = self.vocab.ids[tokens]
        return BlockCandidates(tokens, np.take_along_axis(probs, order, axis=-1))
