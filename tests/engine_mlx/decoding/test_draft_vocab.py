"""The draft vocabulary: proposals come from the frequent tokens plus the context's, its
logits are the full head's columns, a bad file is refused, and output stays lossless."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.api import load_drafter
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.decoding.draft_vocab import (
    FILE,
    frequent_tokens,
    load_draft_vocab,
    save_draft_vocab,
)
from engine_mlx.errors import ModelLoadError
from engine_mlx.models.dflash import save_dflash
from engine_mlx.session import Session
from tests.support.drafters import random_dflash
from tests.support.params import cpu_path_only, slow_except

PROMPT = "Hello world, the quick brown fox"
FREQUENT = np.arange(0, 48, dtype=np.int32)


def test_frequent_tokens_by_count_then_lower_id():
    counts = np.array([0, 5, 0, 9, 5, 0, 1])
    assert frequent_tokens(counts, 3).tolist() == [1, 3, 4]  # 9, then the two 5s
    assert frequent_tokens(counts, 5).tolist() == [0, 1, 3, 4, 6]  # unseen: lowest id first
    assert frequent_tokens(counts, 100).tolist() == list(range(7))


def test_save_load_and_refusals(tmp_path, tiny_target):
    target = tiny_target("llama")
    assert load_draft_vocab(tmp_path, 320) is None  # no file: the full vocabulary
    save_draft_vocab(tmp_path, FREQUENT)
    assert load_draft_vocab(tmp_path, 320).tolist() == FREQUENT.tolist()
    with pytest.raises(ValueError, match="40-token vocabulary"):
        load_draft_vocab(tmp_path, 40)  # ids past the vocabulary
    folder = tmp_path / "drafter"
    save_dflash(random_dflash(target), folder)
    (folder / FILE).write_bytes(b"not numpy at all")
    with pytest.raises(ModelLoadError, match=f"drafter: {FILE} does not hold token ids"):
        load_drafter(folder, target)


def test_proposals_come_from_the_subset_and_the_context(tiny_target):
    target = tiny_target("llama")
    model = random_dflash(target)
    ids = target.tokenizer.encode(PROMPT)
    full, sub = DFlashDrafter(model, target), DFlashDrafter(model, target, FREQUENT)
    out = target.forward(mx.array(ids), target.make_cache(), capture=full.capture_layers)
    for drafter in (full, sub):
        drafter.observe(ids, out.features)
    allowed = set(FREQUENT.tolist()) | set(ids)
    assert set(sub.vocab.ids.tolist()) == allowed and len(sub.vocab) == len(allowed)
    # the subset's logits are the full head's, column for column
    assert mx.allclose(
        sub.block_logits(ids[-1], 4), full.block_logits(ids[-1], 4)[:, mx.array(sub.vocab.ids)]
    )
    block = sub.propose(ids[-1], 4, top_k=8)
    assert set(block.tokens.ravel().tolist()) <= allowed
    assert np.allclose(block.probs.sum(-1) <= 1.0 + 1e-6, True)
    sub.reset()  # a new context: its tokens go, the frequent ones stay
    assert sub.vocab.ids.tolist() == FREQUENT.tolist()


@pytest.mark.parametrize("arch", slow_except(["llama", "qwen3", "qwen3_5"], "llama", "qwen3"))
def test_greedy_output_is_unchanged(arch, tiny_target):
    target = tiny_target(arch)
    ids = target.tokenizer.encode(PROMPT)
    config = GenerationConfig(max_tokens=32, ignore_eos=True)
    plain = list(Session(target).generate(ids, config))[-1].tokens
    drafter = DFlashDrafter(random_dflash(target, conv=4), target, FREQUENT)
    session = Session(target, drafter)
    for width in (1, 3):
        spec = GenerationConfig(max_tokens=32, ignore_eos=True, mode="dflash2", width=width)
        assert list(session.generate(ids, spec))[-1].tokens == plain


@cpu_path_only
def test_a_quantized_head_scores_its_rows_quantized(tiny_model_dir, tmp_path):
    """A quantized tied head's draft rows stay quantized (the engine's product over those
    rows only, not 115 MB of dequantized rows a draft): the full head's columns, within the
    rounding of int8 activations."""
    from engine_mlx.decoding.draft_vocab import DraftVocabulary
    from engine_mlx.models.quantize import quantize_folder
    from engine_mlx.models.target import TargetModel

    target = TargetModel.load(quantize_folder(tiny_model_dir("qwen2"), tmp_path / "q", bits=8))
    vocab = DraftVocabulary.for_target(target, FREQUENT)
    assert vocab is not None and vocab._base_product is not None and vocab._base_rows is None
    hidden = mx.random.normal((3, target.spec.hidden_size))
    want = np.array(target.head(hidden))[:, FREQUENT]
    np.testing.assert_allclose(np.array(vocab.logits(hidden)), want, rtol=0.05, atol=0.05)
    vocab.add([60, 61])  # the context's tokens: their rows as before
    assert vocab.logits(hidden).shape == (3, len(FREQUENT) + 2)
