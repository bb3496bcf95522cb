"""The numpy layers compute mlx-lm's layers: with activations kept float, a prefill, a decoding
step and a verification through them give MLX's logits within float rounding, on every
architecture they take; with int8 activations they are what every forward runs."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.cpu import quantized_product
from engine_mlx.models import numpy_layers
from engine_mlx.models.quantize import quantize_folder
from engine_mlx.models.target import TargetModel

ARCHS = ("llama", "qwen2", "qwen3")


@pytest.fixture(scope="module")
def float_target(tiny_model_dir, tmp_path_factory):
    """``float_target(arch)``: the tiny model at 4 bits, activations float."""
    loaded: dict[str, TargetModel] = {}

    def get(arch: str) -> TargetModel:
        if arch not in loaded:
            out = tmp_path_factory.mktemp(f"numpy_{arch}") / "model"
            with pytest.MonkeyPatch.context() as patch:
                patch.setenv(quantized_product.ACTIVATIONS_SWITCH, "float")
                loaded[arch] = TargetModel.load(
                    quantize_folder(tiny_model_dir(arch), out, bits=4, group=32)
                )
        return loaded[arch]

    return get


def _logits(target: TargetModel, prompt: list[int], tokens: list[int]) -> np.ndarray:
    cache = target.make_cache()
    prefill = np.array(target.forward(mx.array(prompt), cache).logits[0])
    decoded = [prefill[-1], np.array(target.forward(mx.array([tokens[0]]), cache).logits[0, -1])]
    rows, prefix = len(tokens) - 1, target.cache_length(cache)
    tree = mx.array(np.tril(np.ones((rows, rows), bool)))
    mask = mx.concatenate([mx.ones((rows, prefix), dtype=mx.bool_), tree], axis=1)
    verified = target.forward(
        mx.array(tokens[1:]), cache, positions=mx.arange(prefix, prefix + rows), mask=mask,
        tree=tree,
    ).logits[0]  # fmt: skip
    return np.concatenate([np.stack(decoded), np.array(verified)])


@pytest.mark.parametrize("arch", ARCHS)
def test_they_compute_mlx_lms_layers(arch, float_target):
    target = float_target(arch)
    assert target._numpy_layers is None  # float activations: MLX's layers
    layers = numpy_layers.numpy_layers(target.model)
    assert layers is not None and len(layers) == len(target.layers)
    prompt, tokens = list(range(3, 200)), [5, 9, 13, 21, 34]  # prefill's rows: the BLAS's
    expected = _logits(target, prompt, tokens)
    target._numpy_layers = layers
    try:
        got = _logits(target, prompt, tokens)
    finally:
        target._numpy_layers = None
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
def test_decoding_runs_them_where_activations_are_rounded(arch, tiny_model_dir, tmp_path):
    target = TargetModel.load(quantize_folder(tiny_model_dir(arch), tmp_path / "m", bits=4))
    rounds = quantized_product.int8_activations()
    assert (target._numpy_layers is not None) == rounds
    if rounds:
        cache = target.make_cache()
        assert target._numpy_rows(target.embed(mx.array([[1]])), cache, None) is not None
        prefill = mx.zeros((1, 300, target.spec.hidden_size))
        assert len(target._numpy_rows(prefill, cache, "causal")) == 300  # prefill too
