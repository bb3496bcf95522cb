"""Scoring a vocabulary subset gives the same logits as the full head at those tokens, float
or quantized, and a drafter trains against a quantized target."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine_mlx.models.quantize import quantize_folder
from engine_mlx.models.target import TargetModel
from engine_mlx.training.dflash import train_drafter
from engine_mlx.training.vocab import distill_kl, logits_over, renormalised, subset
from tests.engine_mlx.training.test_reference import REFERENCE


def test_subset_logits_match_the_full_head(tiny_target):
    for arch in ("llama", "qwen2"):  # untied and tied heads
        target = tiny_target(arch)
        rng = np.random.default_rng(0)
        teacher = rng.integers(0, target.spec.vocab_size, size=(3, 4))
        scored, index = subset(teacher, target.spec.vocab_size, 16, rng)
        np.testing.assert_array_equal(scored[index], teacher)
        hidden = mx.random.normal((3, target.spec.hidden_size))
        full = np.array(logits_over(target, hidden, None))
        part = np.array(logits_over(target, hidden, mx.array(scored)))
        np.testing.assert_allclose(part, full[:, scored], rtol=1e-5, atol=1e-5)


def test_a_quantized_head_scores_its_own_rows_and_a_drafter_trains_against_it(
    tiny_model_dir, tiny_dataset, tmp_path
):
    """A quantized untied head's subset is its dequantized rows (once the full head's logits
    were taken at subset indices: out of range, a crash), tied or untied."""
    targets = {}
    for arch in ("llama", "qwen2"):  # untied and tied heads
        folder = quantize_folder(tiny_model_dir(arch), tmp_path / arch, bits=4, group=32)
        target = targets[arch] = TargetModel.load(folder)
        assert target.quantized_layers > 0
        scored = mx.array([5, 1, 17, 3])
        hidden = mx.random.normal((2, 3, target.spec.hidden_size), key=mx.random.key(1))
        full = np.array(target.head(hidden))[..., np.array(scored)]
        part = np.array(logits_over(target, hidden, scored))
        assert part.shape == (2, 3, 4)
        np.testing.assert_allclose(part, full, atol=0.03 * np.abs(full).max())  # int8 inputs
    out = tmp_path / "drafter"
    history = train_drafter(targets["llama"], tiny_dataset, out, REFERENCE, log=lambda _: None)
    assert len(history) == REFERENCE.steps and np.isfinite(history[-1]["loss"])


def test_kl_is_zero_only_when_the_student_matches():
    logp = np.log(np.array([[0.7, 0.2, 0.1]], dtype=np.float32))
    p = renormalised(logp)
    ids = mx.array([[0, 1, 2]])
    same = float(distill_kl(mx.array(logp), ids, mx.array(p))[0])
    other = float(distill_kl(mx.array(logp[:, ::-1].copy()), ids, mx.array(p))[0])
    assert abs(same) < 1e-5 and other > 0.1
