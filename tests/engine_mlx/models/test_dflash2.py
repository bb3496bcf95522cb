"""llama.cpp's DFlash2, held to its specification: the dynamic convolution and the selector
against loops written straight from llama.cpp's formulas, the walk token for token, the
Hugging Face layout loaded and round-tripped, bad metadata refused with a message."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten

from engine_mlx.backend import KERNEL_SWITCH
from engine_mlx.compute_path import PATH_SWITCH
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.decoding.sampling import Sampler, SamplingParams
from engine_mlx.decoding.selector import AcceptanceCalibrator
from engine_mlx.decoding.strategies import Speculative
from engine_mlx.errors import ModelLoadError
from engine_mlx.models.dflash import DFlashModel, load_dflash, save_dflash
from engine_mlx.models.dflash2 import DynamicConv, Lattice
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session
from tests.support.drafters import random_dflash
from tests.support.params import slow_except
from tests.support.tiny_models import build_tiny_model

PROMPT = "The quick brown fox jumps over the lazy dog"


def conv_by_definition(x, coeffs, base, side, group) -> np.ndarray:
    """Y[p, h] = sum_j (base[s, j, h] + D[p][s, j, h // g]) * X[p - j, h], X = 0 before the
    block (llama.cpp's ``build_dflash2_conv``)."""
    blocks, length, hidden = x.shape
    kernel = base.shape[1]
    d = coeffs.reshape(blocks, length, 2, kernel, hidden // group)
    y = np.zeros_like(x)
    for n in range(blocks):
        for p in range(length):
            for h in range(hidden):
                for j in range(min(kernel, p + 1)):
                    w = base[side, j, h] + d[n, p, side, j, h // group]
                    y[n, p, h] += w * x[n, p - j, h]
    return y


@pytest.mark.parametrize(("kernel", "length"), [(3, 5), (4, 2), (1, 3)])
def test_the_dynamic_convolution_is_llama_cpps(kernel, length):
    rng = np.random.default_rng(kernel)
    hidden, group = 12, 4
    conv = DynamicConv(hidden, kernel, group)
    conv.base_kernel = mx.array(rng.normal(size=(2, kernel, hidden)).astype(np.float32))
    x = rng.normal(size=(2, length, hidden)).astype(np.float32)
    coeffs = rng.normal(size=(2, length, 2 * kernel * hidden // group)).astype(np.float32)
    for side in (0, 1):
        got = np.array(conv(mx.array(x), mx.array(coeffs), side))
        want = conv_by_definition(x, coeffs, np.array(conv.base_kernel), side, group)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_new_convolution_and_an_empty_selector_change_nothing(tiny_target):
    """At initialisation (the warm start from a DFlash drafter) the dynamic convolution is
    the identity: the same weights give the same states with and without it."""
    target = tiny_target("llama")
    v1 = random_dflash(target, seed=3)
    cfg = v1.config.__class__(**{**v1.config.__dict__, "conv_kernel_size": 3,
                                 "conv_group_size": 16, "selector_rank": 8,
                                 "selector_top_k": 4})  # fmt: skip
    ref = DFlashModel(cfg)
    ref.load_weights(list(tree_flatten(v1.parameters())), strict=False)
    ids = target.tokenizer.encode(PROMPT)
    states = []
    for model in (v1, ref):
        drafter = DFlashDrafter(model, target)
        out = target.forward(mx.array(ids), target.make_cache(), capture=drafter.capture_layers)
        drafter.observe(ids, out.features)
        states.append(drafter.block_hidden(ids[-1], 5))
    assert mx.allclose(states[0], states[1], atol=1e-6)


def lattice_by_definition(model: DFlashModel, anchor: int, logits: np.ndarray, z: np.ndarray):
    """Candidates and scores straight from llama.cpp's formulas (``build_dflash2_selector``):
    s_t[i][j] = u_t[j] + sum_r P[prev_i][r] * g_t[r] * S[cand_j][r], prev of t=1 the anchor."""
    sel = model.candidate_selector
    k = model.config.selector_top_k
    pred, succ = (np.array(c.astype(mx.float32)).astype(np.float64)
                  for c in (sel.predecessor_codebook, sel.successor_codebook))  # fmt: skip
    projection = np.array(sel.hidden_projection.weight.astype(mx.float32)).astype(np.float64)
    gate = z.astype(np.float64) @ projection.T
    cands = np.array([sorted(range(len(r)), key=lambda t: (-r[t], t))[:k] for r in logits])
    scores = np.zeros((len(logits), k, k))
    for t in range(len(logits)):
        for i in range(k):
            prev = anchor if t == 0 else cands[t - 1, i]
            for j in range(k):
                bigram = np.sum(pred[prev] * gate[t] * succ[cands[t, j]])
                scores[t, i, j] = logits[t, cands[t, j]] + bigram
    return cands, scores


def walk_by_definition(cands: np.ndarray, scores: np.ndarray) -> list[int]:
    """``common/speculative.cpp``'s DFlash2 loop: argmax of the chosen predecessor's row."""
    out, pred = [], 0
    for t in range(len(cands)):
        pred = int(np.argmax(scores[t, pred]))
        out.append(int(cands[t, pred]))
    return out


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_the_selector_and_its_walk_are_llama_cpps(arch, tiny_target):
    target = tiny_target(arch)
    model = random_dflash(target, reference=True, seed=7)
    drafter = DFlashDrafter(model, target)
    ids = target.tokenizer.encode(PROMPT)
    out = target.forward(mx.array(ids), target.make_cache(), capture=drafter.capture_layers)
    drafter.observe(ids, out.features)
    for anchor in (ids[-1], 7, 11):
        z = drafter.block_hidden(anchor, 5)
        logits = np.array(drafter.block_logits(anchor, 5, z))
        cands, scores = lattice_by_definition(model, anchor, logits, np.array(z))
        lattice = drafter.lattice(anchor, 5)
        np.testing.assert_array_equal(lattice.candidates, cands)
        np.testing.assert_allclose(lattice.scores, scores, rtol=1e-4, atol=1e-4)
        walk = walk_by_definition(cands, scores)
        assert lattice.walk() == walk
        # width 1 verifies exactly that chain (no lookup: llama.cpp has none)
        strategy = Speculative(
            "dflash2", target, target.make_cache(), Sampler(SamplingParams()),
            AcceptanceCalibrator(), drafter=drafter, width=1, block_size=6,
        )  # fmt: skip
        assert strategy.propose(anchor, 5).tokens[1:] == walk


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16], ids=["float16", "bfloat16"])
def test_a_half_precision_selector_scores_in_float32_as_llama_cpp_does(
    dtype, tmp_path, monkeypatch
):
    """A Mac's drafter holds half-precision weights; llama.cpp multiplies them into float32
    scores, and the ``p_min`` cut compares float32 softmaxes. Half-precision arithmetic would
    be off by ~1e-3 here and move cuts near ``p_min``; the scores match the definition over
    the same half weights to float32 rounding."""
    monkeypatch.setenv(PATH_SWITCH, "gpu")  # the target in its checkpoint's half precision
    monkeypatch.setenv(KERNEL_SWITCH, "0")
    target = TargetModel.load(build_tiny_model("qwen3", tmp_path, dtype=str(dtype).split(".")[-1]))
    assert target.dtype == dtype
    model = random_dflash(target, reference=True, seed=7)
    model.set_dtype(dtype)
    drafter = DFlashDrafter(model, target)
    ids = target.tokenizer.encode(PROMPT)
    out = target.forward(mx.array(ids), target.make_cache(), capture=drafter.capture_layers)
    drafter.observe(ids, out.features)
    anchor = ids[-1]
    z = drafter.block_hidden(anchor, 5)
    logits = np.array(drafter.block_logits(anchor, 5, z).astype(mx.float32))
    cands, scores = lattice_by_definition(model, anchor, logits, np.array(z.astype(mx.float32)))
    lattice = drafter.lattice(anchor, 5)
    assert lattice.scores.dtype == np.float32
    np.testing.assert_array_equal(lattice.candidates, cands)
    np.testing.assert_allclose(lattice.scores, scores, rtol=1e-5, atol=2e-5)
    assert lattice.walk() == walk_by_definition(cands, scores)


def test_p_min_and_n_min_cut_the_walk_as_llama_cpp_does():
    scores = np.array([[[2.0, 0.0], [2.0, 0.0]], [[0.1, 0.0], [0.0, 5.0]], [[1.0, 0.0]] * 2])
    lattice = Lattice(np.array([[10, 11], [20, 21], [30, 31]]), scores)
    assert lattice.walk() == [10, 20, 30]  # row 0 after 10: 20; row 1 (after 11) unused
    assert lattice.walk(p_min=0.6) == [10]  # after 10, 20 wins with softmax 0.52 < 0.6
    assert lattice.walk(p_min=0.5) == [10, 20, 30]
    assert lattice.walk(n_min=4) == [] and lattice.walk(p_min=0.6, n_min=2) == []


@pytest.mark.parametrize(
    "arch", slow_except(["llama", "qwen2", "qwen3", "qwen3_5"], "llama", "qwen3_5")
)
def test_reference_dflash2_greedy_equals_plain_greedy(arch, tiny_target):
    target = tiny_target(arch)
    ids = target.tokenizer.encode(PROMPT)
    plain = list(Session(target).generate(ids, GenerationConfig(max_tokens=24)))[-1].tokens
    session = Session(target, DFlashDrafter(random_dflash(target, reference=True), target))
    for width in (1, 3):
        config = GenerationConfig(max_tokens=24, mode="dflash2", width=width, lookup=False)
        got = list(session.generate(ids, config))[-1]
        assert got.tokens == plain, width
        assert got.stats.drafted > 0


def _hf_folder(tmp_path, model: DFlashModel):
    """The Hugging Face layout llama.cpp's converter reads: ``model.`` prefixes, the
    codebooks without ``.weight``, DFlash2DraftModel with the four keys in dflash_config."""
    folder = save_dflash(model, tmp_path / "saved")
    weights = {f"model.{k}": v for k, v in mx.load(str(folder / "model.safetensors")).items()}
    mx.save_safetensors(str(folder / "model.safetensors"), weights)
    return folder


def test_the_hugging_face_layout_loads_and_round_trips(tiny_target, tmp_path):
    target = tiny_target("qwen3")
    model = random_dflash(target, reference=True)
    folder = _hf_folder(tmp_path, model)
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["architectures"] == ["DFlash2DraftModel"]
    assert {"conv_kernel_size", "conv_group_size", "selector_rank", "selector_top_k"} <= set(
        cfg["dflash_config"]
    )
    again = load_dflash(folder)
    assert again.config == model.config
    for (name, a), (_, b) in zip(
        sorted(tree_flatten(model.parameters())),
        sorted(tree_flatten(again.parameters())),
        strict=True,
    ):
        assert mx.array_equal(a, b), name


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"conv_group_size": 24}, "does not divide the hidden size 64"),
        ({"selector_top_k": 8}, r"at least k\*\(k\+1\) = 72"),
        ({"selector_rank": 0}, "missing or not positive: selector_rank"),
        ({"local_conv_kernel": 4}, "cannot join a DFlash2 config"),
    ],
)
def test_bad_dflash2_metadata_is_refused_with_a_message(change, message, tiny_target, tmp_path):
    folder = save_dflash(random_dflash(tiny_target("llama"), reference=True), tmp_path / "d")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["dflash_config"].update(change)
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match=message):
        load_dflash(folder)


def test_missing_and_misshapen_tensors_are_refused(tiny_target, tmp_path):
    folder = save_dflash(random_dflash(tiny_target("llama"), reference=True), tmp_path / "d")
    file = folder / "model.safetensors"
    weights = mx.load(str(file))
    del weights["layers.0.mlp_conv.base_kernel"]
    mx.save_safetensors(str(file), weights)
    with pytest.raises(ModelLoadError, match=r"missing: layers\.0\.mlp_conv\.base_kernel"):
        load_dflash(folder)
    weights["layers.0.mlp_conv.base_kernel"] = mx.zeros((2, 5, 64))
    mx.save_safetensors(str(file), weights)
    with pytest.raises(ModelLoadError, match=r"base_kernel has shape \(2, 5, 64\)"):
        load_dflash(folder)
    weights["layers.0.mlp_conv.base_kernel"] = mx.zeros((2, 3, 64))
    weights["lm_head.weight"] = mx.zeros((4, 64))
    mx.save_safetensors(str(file), weights)
    with pytest.raises(ModelLoadError, match=r"cannot use: lm_head\.weight"):
        load_dflash(folder)
