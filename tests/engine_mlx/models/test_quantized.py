"""MLX-quantized targets on the CPU: every quantized layer runs on the engine's product, its
forward agrees with MLX's own quantized kernels, and every speculative mode stays lossless
(greedy token for token, sampling in distribution)."""

from __future__ import annotations

from itertools import product
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from mlx.utils import tree_flatten

from engine_mlx.config import GenerationConfig
from engine_mlx.cpu import quantized_product
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.decoding.mtp_drafter import MTPDrafter
from engine_mlx.decoding.sampling import SamplingParams
from engine_mlx.models import attention, quantized
from engine_mlx.models.quantize import quantize_folder
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session
from tests.support.distribution import position_p_values, sample_replies
from tests.support.drafters import OracleDrafter, random_dflash, random_mtp_head
from tests.support.params import slow_except
from tests.support.tiny_models import build_tiny_model

PROMPT = "Hello world, the quick brown fox"
SPEC_ARCHS = ("llama", "qwen3", "qwen3_5")


@pytest.fixture(scope="module")
def quantized_dir(tiny_model_dir, tmp_path_factory):
    """``quantized_dir(arch, bits)``: the tiny model quantized by mlx-lm, groups of 32."""
    built: dict[tuple[str, int], Path] = {}

    def get(arch: str, bits: int) -> Path:
        if (arch, bits) not in built:
            out = tmp_path_factory.mktemp(f"q{bits}_{arch}") / "model"
            built[arch, bits] = quantize_folder(tiny_model_dir(arch), out, bits=bits, group=32)
        return built[arch, bits]

    return get


@pytest.fixture(scope="module")
def quantized_target(quantized_dir):
    loaded: dict[tuple[str, int], TargetModel] = {}

    def get(arch: str, bits: int = 4) -> TargetModel:
        if (arch, bits) not in loaded:
            loaded[arch, bits] = TargetModel.load(quantized_dir(arch, bits))
        return loaded[arch, bits]

    return get


def _tokens(session: Session, ids: list[int], **kw) -> tuple[int, ...]:
    finished = list(session.generate(ids, GenerationConfig(ignore_eos=True, **kw)))[-1]
    assert finished.reason == "max_tokens", finished
    return finished.tokens


def _mlx_lm_logits(folder: Path, ids: list[int]) -> np.ndarray:
    """The same file through mlx-lm and MLX's own quantized kernels."""
    from mlx_lm.utils import load_model

    model, _ = load_model(folder)
    model.set_dtype(mx.float32)
    return np.array(model(mx.array(ids)[None]))[0]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "qwen3_5"])
def test_every_quantized_layer_runs_on_the_engine_product(arch, quantized_dir):
    folder = quantized_dir(arch, 4)
    target = TargetModel.load(folder)
    layers = [m for _, m in tree_flatten(target.model.leaf_modules(), is_leaf=nn.Module.is_module)]
    kinds = (nn.QuantizedLinear, nn.QuantizedEmbedding)
    quantized_layers = [m for m in layers if isinstance(m, kinds)]
    assert quantized_layers and target.quantized_layers == len(quantized_layers)
    assert target.dtype == mx.float32  # what drafters are cast to: not the packed uint32
    assert all(
        isinstance(m, (quantized.CpuQuantizedLinear, quantized.CpuQuantizedEmbedding))
        for m in quantized_layers
    )
    ids = target.tokenizer.encode(PROMPT)
    ours = np.array(target.forward(mx.array(ids), target.make_cache()).logits)[0]
    theirs = _mlx_lm_logits(folder, ids)
    scale = np.abs(theirs).max()
    tolerance = 0.1 if quantized_product.int8_activations() else 1e-4  # x rounded to int8 per group
    assert np.abs(ours - theirs).max() <= tolerance * scale


def test_4_bit_layers_multiply_in_panels_and_mlx_keeps_their_values(quantized_dir):
    """Where the build multiplies panels (AVX2), a 4-bit target's products read its weights in
    panels; MLX's own ``weight`` still holds the file's values (a lazy view of the same buffer,
    for MLX's kernels), and MLX's kernel over it agrees with the engine's product."""
    width = quantized_product.product().panel_width()
    if not quantized_product.int8_activations() or not width:
        pytest.skip("this build keeps MLX's row layout (no AVX2 int8 path)")
    folder = quantized_dir("qwen2", 4)
    saved = mx.load(str(folder / "model.safetensors"))
    target = TargetModel.load(folder)
    layers = tree_flatten(target.model.leaf_modules(), is_leaf=nn.Module.is_module)
    checked = 0
    for name, layer in layers:
        if not isinstance(layer, quantized.CpuQuantizedLinear):
            continue
        assert layer._matrix.panel == width, name
        assert np.array_equal(np.array(layer.weight), np.array(saved[f"{name}.weight"])), name
        x = mx.array(np.random.default_rng(checked).standard_normal((3, layer._matrix.k)))
        ours = np.array(layer(x.astype(mx.float32)))
        mlx_kernel = np.array(layer(x.astype(mx.float16)).astype(mx.float32))
        np.testing.assert_allclose(ours, mlx_kernel, rtol=0.05, atol=0.05 * np.abs(ours).max())
        checked += 1
    assert checked


def test_float_activations_match_mlx_quantized_kernels_closely(quantized_dir, monkeypatch):
    monkeypatch.setenv(quantized_product.ACTIVATIONS_SWITCH, "float")
    folder = quantized_dir("qwen3", 8)
    target = TargetModel.load(folder)
    ids = target.tokenizer.encode(PROMPT)
    ours = np.array(target.forward(mx.array(ids), target.make_cache()).logits)[0]
    np.testing.assert_allclose(ours, _mlx_lm_logits(folder, ids), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("bits", "arch"), slow_except(product((4, 8), SPEC_ARCHS), (4, "llama"), (8, "qwen3"))
)
def test_speculative_greedy_equals_plain_greedy_on_a_quantized_target(arch, bits, quantized_target):
    target = quantized_target(arch, bits)
    ids = target.tokenizer.encode(PROMPT)
    plain = _tokens(Session(target), ids, max_tokens=32)
    dflash = Session(target, DFlashDrafter(random_dflash(target, conv=4), target))
    for width in (1, 3):
        got = _tokens(dflash, ids, max_tokens=32, mode="dflash2", width=width)
        assert got == plain, ("dflash2", width)
    mtp = Session(target, mtp=MTPDrafter(random_mtp_head(target), target, steps=3))
    assert _tokens(mtp, ids, max_tokens=32, mode="mtp") == plain
    oracle = Session(target, OracleDrafter(target, block_size=5))
    assert _tokens(oracle, ids, max_tokens=32, mode="dflash2", width=2) == plain
    repeat = target.tokenizer.encode("one two three one two three one two")
    looked = _tokens(Session(target), repeat, max_tokens=32, mode="lookup", width=3)
    assert looked == _tokens(Session(target), repeat, max_tokens=32)


@pytest.mark.slow
def test_sampled_distribution_matches_plain_sampling_on_a_quantized_target(tmp_path):
    source = build_tiny_model("qwen3", tmp_path / "full", vocab_size=12, seed=3)
    target = TargetModel.load(quantize_folder(source, tmp_path / "q4", bits=4, group=32))
    assert target.quantized_layers > 0
    params = SamplingParams(temperature=0.6, top_k=8)
    session = Session(target, OracleDrafter(target, block_size=3))
    prompt = [3, 5, 7, 3, 5]
    replies, accepted = sample_replies(
        session, prompt, range(20_000, 20_300), 3, mode="dflash2", width=3, sampling=params
    )
    p_values = position_p_values(target, prompt, replies, params)
    assert min(p_values) > 1e-3, p_values
    assert accepted > 300 // 4


@pytest.mark.slow
def test_the_4_bit_demo_with_float_activations_decodes_as_mlx_lm(qwen_4bit_dir, monkeypatch):
    """Greedy equal to mlx-lm on the same 4-bit weights. mlx-lm's own CPU kernel for quantized
    products is far too slow to decode with here, so mlx-lm runs the weights dequantized
    (``mlx_lm.utils.dequantize_model``): the same numbers, float activations."""
    from mlx_lm.generate import generate_step
    from mlx_lm.utils import dequantize_model, load_model

    from engine_mlx.api import encode_prompt

    monkeypatch.setenv(quantized_product.ACTIVATIONS_SWITCH, "float")
    target = TargetModel.load(qwen_4bit_dir)
    ids = encode_prompt(
        target, "Write a Python function that checks whether a year is a leap year."
    )
    ours = _tokens(Session(target), ids, max_tokens=24)
    model, _ = load_model(qwen_4bit_dir)
    model = dequantize_model(model)
    model.set_dtype(mx.float32)
    steps = generate_step(mx.array(ids), model, max_tokens=24)
    assert list(ours) == [int(tok) for (tok, _), _ in zip(steps, range(24), strict=False)]


def test_prefill_rows_go_through_the_blas_and_verification_rows_never():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((300, 128)).astype(np.float32)
    packed, scales, biases = (np.array(a) for a in mx.quantize(mx.array(w), group_size=64))
    matrix = quantized_product.product().matrix(packed, scales, biases, bits=4, group=64)
    dense = np.array(mx.dequantize(*(mx.array(a) for a in (packed, scales, biases))))
    rows = rng.standard_normal((quantized.PREFILL_ROWS, 128)).astype(np.float32)
    np.testing.assert_allclose(  # float activations, float weights: the BLAS's product
        quantized.multiply_rows(matrix, rows, True), rows @ dense.T, rtol=1e-4, atol=1e-4
    )
    with attention.active(tree=mx.ones((2, 2), dtype=mx.bool_)):  # a verification forward
        verified = quantized.multiply_rows(matrix, rows, True)
    assert np.array_equal(verified, matrix.multiply(rows, int8=True))


@pytest.mark.parametrize("arch", ["llama", "qwen3_5"])
def test_speculation_stays_lossless_when_prefill_goes_through_the_blas(
    arch, quantized_target, monkeypatch
):
    """Prompts of 4 tokens and more prefill through the BLAS; verification trees of as many
    rows must still take the product plain decoding takes."""
    monkeypatch.setattr(quantized, "PREFILL_ROWS", 4)
    target = quantized_target(arch, 4)
    ids = target.tokenizer.encode(PROMPT)
    plain = _tokens(Session(target), ids, max_tokens=24)
    oracle = Session(target, OracleDrafter(target, block_size=6))
    assert _tokens(oracle, ids, max_tokens=24, mode="dflash2", width=2) == plain


def _verify_and_plain_logits(target: TargetModel, prompt: list[int], tokens: list[int]):
    plain_cache = target.make_cache()
    target.forward(mx.array(prompt), plain_cache)
    plain = [np.array(target.forward(mx.array([t]), plain_cache).logits[0, -1]) for t in tokens]
    cache = target.make_cache()
    mx.eval(target.forward(mx.array(prompt), cache).logits)
    rows, prefix = len(tokens), target.cache_length(cache)
    tree = mx.array(np.tril(np.ones((rows, rows), bool)))
    mask = mx.concatenate([mx.ones((rows, prefix), dtype=mx.bool_), tree], axis=1)
    positions = mx.arange(prefix, prefix + rows)
    out = target.forward(mx.array(tokens), cache, positions=positions, mask=mask, tree=tree)
    return np.array(out.logits[0]), np.stack(plain)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_verification_computes_plain_decodings_bits(arch, quantized_target):
    """With activations rounded to int8, any last-bit difference becomes a different token:
    a verification's logits must be plain decoding's exactly (exact_attention)."""
    target = quantized_target(arch, 4)
    assert target.exact_attention == quantized_product.int8_activations()
    ids = target.tokenizer.encode(PROMPT)
    verified, plain = _verify_and_plain_logits(target, ids, [5, 9, 13, 21, 34, 55])
    assert np.array_equal(verified, plain)


def test_a_hybrid_target_keeps_float_activations(quantized_target):
    """Its recurrent layers replay accepted drafts in one pass: not row by row, so int8
    rounding is left off there."""
    target = quantized_target("qwen3_5", 4)
    assert target.quantized_layers > 0
    assert not quantized.rounds_activations(target.model) and not target.exact_attention


@pytest.mark.slow
def test_the_4_bit_demo_verifies_with_plain_decodings_bits(qwen_4bit_dir):
    target = TargetModel.load(qwen_4bit_dir)
    prompt = list(range(100, 147))
    verified, plain = _verify_and_plain_logits(target, prompt, [1000, 2000, 3000, 4000, 5000])
    assert np.array_equal(verified, plain)
