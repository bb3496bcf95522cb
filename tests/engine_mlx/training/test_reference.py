"""Training llama.cpp's DFlash2: a warm start carries a trained drafter's network, the
selector's training scores are the lattice's run-time scores, and a trained reference drafter
learns, saves, loads and drafts losslessly."""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np

from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.models.dflash import load_dflash
from engine_mlx.session import Session
from engine_mlx.training.dflash import (
    BlockSampler,
    DrafterTrainConfig,
    drafter_hidden,
    drafter_loss,
    new_drafter,
    train_drafter,
)
from engine_mlx.training.reference import reference_from, selector_loss
from engine_mlx.training.vocab import logits_over

PRESENT = DrafterTrainConfig(steps=2, layers=2, block=5, conv=3, sequences=3, anchors=4)
REFERENCE = replace(PRESENT, conv_group=16, selector_rank=4, selector_top_k=4)


def _randomised(model, seed: int) -> None:
    """Every weight of ``model`` moved off its start, so nothing is carried by accident."""
    rng = np.random.default_rng(seed)
    model.update(
        {
            name: mx.array(p + 0.05 * rng.standard_normal(p.shape), mx.float32)
            for name, p in _flat(model).items()
        },
        strict=False,
    )


def _flat(model) -> dict[str, np.ndarray]:
    from mlx.utils import tree_flatten

    return {k: np.array(v) for k, v in tree_flatten(model.parameters())}


def test_a_warm_start_carries_the_network_and_drops_only_the_fixed_convolution(
    tiny_dataset, tiny_target
):
    target = tiny_target("llama")
    source = new_drafter(target, PRESENT, (0, 1))
    _randomised(source, 1)
    model = reference_from(source, 3, 16, 4, 4)
    assert model.config.reference_dflash2 and not model.config.local_conv_kernel
    mine, theirs = _flat(model), _flat(source)
    carried = [k for k in theirs if ".local_conv." not in k]
    assert all(np.array_equal(mine[k], theirs[k]) for k in carried)
    for layer in source.layers:  # the same network without its fixed convolution
        layer.local_conv.weight = mx.zeros(layer.local_conv.weight.shape)
    batch = BlockSampler(tiny_dataset, PRESENT.block).sample(np.random.default_rng(0), 2, 3)
    mask_id = int(model.config.mask_token_id)
    np.testing.assert_allclose(
        np.array(drafter_hidden(model, target, batch, mask_id)),
        np.array(drafter_hidden(source, target, batch, mask_id)),
        atol=1e-5,
    )


def test_the_selectors_training_scores_are_its_run_time_lattice(tiny_dataset, tiny_target):
    target = tiny_target("llama")
    model = new_drafter(target, REFERENCE, (0, 1))
    selector = model.candidate_selector
    rng = np.random.default_rng(2)
    for part in (selector, selector.hidden_projection):  # a bigram term that outweighs logits
        for name, p in list(part.items()):
            if isinstance(p, mx.array):
                setattr(part, name, mx.array(3.0 * rng.standard_normal(p.shape), mx.float32))
    batch = BlockSampler(tiny_dataset, REFERENCE.block).sample(np.random.default_rng(3), 2, 3)
    hidden = drafter_hidden(model, target, batch, int(model.config.mask_token_id))
    logits = logits_over(target, hidden, None)
    labels = mx.argmax(logits, axis=-1)  # labels the draft ranks first: always candidates
    weights = mx.ones(labels.shape)
    _, walked = selector_loss(model, hidden, logits, batch.roots, labels, None, weights)
    k = REFERENCE.selector_top_k
    for n in range(labels.shape[0]):
        candidates = mx.argsort(-logits[n], axis=-1)[:, :k]
        unary = mx.take_along_axis(logits[n], candidates, axis=-1)
        lattice = np.array(
            model.candidate_selector.scores(int(batch.roots[n]), candidates, unary, hidden[n])
        )
        ids = np.array(candidates)
        previous = 0
        for t in range(labels.shape[1]):
            wanted = int(np.flatnonzero(ids[t] == int(labels[n, t]))[0])
            assert bool(walked[n, t]) == (int(np.argmax(lattice[t, previous])) == wanted)
            previous = wanted


def test_a_reference_drafter_trains_from_a_warm_start_and_drafts_losslessly(
    tiny_dataset, tiny_target, tmp_path
):
    target = tiny_target("llama")
    start = tmp_path / "present"
    train_drafter(target, tiny_dataset, start, PRESENT, log=lambda _: None)
    config = replace(REFERENCE, steps=12, lr=3e-3, warmup=2, warm_start=str(start))
    sampler = BlockSampler(tiny_dataset, config.block)
    held = sampler.sample(np.random.default_rng(99), 3, 6)

    def held_loss(model) -> float:
        mask_id = int(model.config.mask_token_id)
        return float(drafter_loss(model, target, held, mask_id, config.decay)[0])

    before = held_loss(new_drafter(target, config, (0, 1)))
    out = tmp_path / "reference"
    history = train_drafter(target, tiny_dataset, out, config, log=lambda _: None)
    assert all("tau_walk" in h for h in history)
    trained = load_dflash(out)
    assert trained.config.reference_dflash2
    assert np.abs(np.array(trained.candidate_selector.hidden_projection.weight)).max() > 0
    assert held_loss(trained) < before
    ids = target.tokenizer.encode("The quick brown")
    plain = list(Session(target).generate(ids, GenerationConfig(max_tokens=24, ignore_eos=True)))
    for width in (1, 3):
        spec_cfg = GenerationConfig(max_tokens=24, ignore_eos=True, mode="dflash2", width=width)
        spec = list(Session(target, DFlashDrafter(trained, target)).generate(ids, spec_cfg))
        assert spec[-1].tokens == plain[-1].tokens
