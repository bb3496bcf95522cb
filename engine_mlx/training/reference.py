"""Training llama.cpp's DFlash2: a drafter's start in the reference format, and the
selector's own loss.

A reference drafter starts from a trained drafter of any variant (``warm_start``): every
tensor whose name and shape match is copied (the context projection, attention, MLPs, norms),
FlashChat's fixed convolution is dropped, and the dynamic convolutions start at identity
(``DynamicConv``'s own start). The selector must not start at exactly zero: its score is a
trilinear form, so with all three factors zero no gradient reaches any of them. Its codebooks
start small and random and its hidden projection at zero, so the first walk is the draft's
greedy argmax, and the projection's gradient is what sets the rest moving.

The selector learns from its own loss over the k candidates it will see at run time: at
position t, the draft's top-k (by logit, over the tokens scored this step), scored after the
token the target chose at t-1 (the anchor at t = 1: the walk's predecessor whenever the
draft was right so far), and a cross-entropy towards the target's choice at t wherever it is
among them. The draft's logits and hidden states enter as constants: the distillation loss
alone shapes the drafter, this one only the selector.
"""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np
from mlx.utils import tree_flatten

from engine_mlx.models.dflash import DFlashModel

CODEBOOK_SCALE = 0.02


def reference_from(
    source: DFlashModel, conv_kernel: int, conv_group: int, rank: int, top_k: int
) -> DFlashModel:
    """A reference DFlash2 drafter carrying ``source``'s matching tensors (see the module)."""
    cfg = replace(
        source.config,
        local_conv_kernel=0,
        conv_kernel_size=conv_kernel,
        conv_group_size=conv_group,
        selector_rank=rank,
        selector_top_k=top_k,
    )
    problem = cfg.problem()
    if problem:
        raise ValueError(f"reference drafter: {problem}")
    model = DFlashModel(cfg)
    mine = dict(tree_flatten(model.parameters()))
    carried = [
        (name, value.astype(mx.float32))
        for name, value in tree_flatten(source.parameters())
        if name in mine and mine[name].shape == value.shape
    ]
    model.load_weights(carried, strict=False)
    start_selector(model)
    return model


def start_selector(model: DFlashModel, seed: int = 0) -> None:
    """Small random codebooks, a zero hidden projection: scores equal the logits at first."""
    selector = model.candidate_selector
    rng = np.random.default_rng(seed)
    for name in ("predecessor_codebook", "successor_codebook"):
        shape = getattr(selector, name).shape
        setattr(selector, name, mx.array(CODEBOOK_SCALE * rng.standard_normal(shape), mx.float32))
    mx.eval(model.parameters())


def selector_loss(
    model: DFlashModel,
    hidden: mx.array,
    logits: mx.array,
    roots: mx.array,
    labels: mx.array,
    scored: mx.array | None,
    weights: mx.array,
) -> tuple[mx.array, mx.array]:
    """(weighted cross-entropy over the candidates, [N, B-1] whether the walk's pick is the
    label). ``hidden`` [N, B-1, H] and ``logits`` [N, B-1, V'] of the masked positions,
    ``labels`` [N, B-1] the target's choices as indices into ``scored`` (the token ids this
    step scores; None: the whole vocabulary), ``roots`` [N] the anchors' tokens."""
    k = model.config.selector_top_k
    logits, hidden = mx.stop_gradient(logits), mx.stop_gradient(hidden)
    top = mx.argpartition(-logits, kth=k - 1, axis=-1)[..., :k]  # [N, B-1, k]
    unary = mx.take_along_axis(logits, top, axis=-1)
    ids = top if scored is None else scored[top]
    label_ids = labels if scored is None else scored[labels]
    previous = mx.concatenate([roots[:, None], label_ids[:, :-1]], axis=1)  # [N, B-1]
    selector = model.candidate_selector
    gated = selector.predecessor_codebook[previous] * selector.hidden_projection(hidden)
    successors = selector.successor_codebook[ids]  # [N, B-1, k, R]
    scores = (successors @ gated[..., None]).squeeze(-1) + unary  # [N, B-1, k]
    hit = top == labels[..., None]
    present = hit.any(axis=-1)
    wanted = mx.argmax(hit.astype(mx.int32), axis=-1)
    chosen = mx.take_along_axis(scores, wanted[..., None], axis=-1).squeeze(-1)
    per_position = mx.logsumexp(scores, axis=-1) - chosen
    w = weights * present.astype(mx.float32)
    loss = (per_position * w).sum() / mx.maximum(w.sum(), 1.0)
    picked_right = present & (mx.argmax(scores, axis=-1) == wanted)
    return loss, picked_right
