"""The decoder layer's work around its attention in C: with float activations, a numpy
transcription of the layer (dequantized weights) within float rounding, for the shapes of
llama, qwen2 (biases) and qwen3 (per-head norms), either rotation layout and a partial one;
with int8 activations too, a row's bits the same alone or among others, on every build this
CPU can run."""

from __future__ import annotations

import numpy as np
import pytest

from engine_mlx import blas
from engine_mlx.cpu.quant_gemm import QuantGemm
from engine_mlx.cpu.quant_layer import LayerShape, LayerWeights, QuantLayer
from tests.engine_mlx.cpu.builds import skip_unless_runnable
from tests.engine_mlx.cpu.test_quant_gemm import BUILDS, _quantized

HIDDEN, WIDE, HEADS, KV_HEADS, D = 128, 320, 4, 2, 32
EPS = 1e-6


def _build(march: str = "native") -> QuantGemm:
    """A build on the engine's thread pool: rows split between threads as in a forward."""
    gemm = QuantGemm(march)
    small = blas.small_gemm()
    if small is not None:
        gemm.use_pool(small.library)
    return gemm


def _layer(
    gemm: QuantGemm, rng, *, biases: bool, head_norms: bool, rope: tuple[int, bool],
    panels: bool = False,
):  # fmt: skip
    shapes = {"q": (HEADS * D, HIDDEN), "k": (KV_HEADS * D, HIDDEN), "v": (KV_HEADS * D, HIDDEN),
              "o": (HIDDEN, HEADS * D), "gate": (WIDE, HIDDEN), "up": (WIDE, HIDDEN),
              "down": (HIDDEN, WIDE)}  # fmt: skip
    matrices, dense = {}, {}
    for name, (n, k) in shapes.items():
        half = name in ("q", "gate", "down")  # mixed, as a job may hold both kinds
        packed, scales, bias_terms, dense[name] = _quantized(rng, n, k, 4, 32, half)
        # smaller weights keep activations in a realistic range through the layer (a power
        # of two: float16 values stay float16 values)
        scales, bias_terms = scales * np.float32(0.25), bias_terms * np.float32(0.25)
        dense[name] *= 0.25
        matrices[name] = gemm.matrix(packed, scales, bias_terms, bits=4, group=32, panels=panels)
        assert matrices[name].half == half

    def norm(n: int) -> tuple[np.ndarray, float]:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32), EPS

    weights = LayerWeights(
        input_norm=norm(HIDDEN), mlp_norm=norm(HIDDEN),
        q_norm=norm(D) if head_norms else None, k_norm=norm(D) if head_norms else None,
        matrices=matrices,
        biases={name: rng.standard_normal(shapes[name][0]).astype(np.float32) if biases
                and name != "o" else None for name in ("q", "k", "v", "o")},
    )  # fmt: skip
    shape = LayerShape(HEADS, KV_HEADS, D, *rope)
    return QuantLayer(gemm, shape, weights), weights, dense


def _rms(x, norm):
    weight, eps = norm
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _rotate(x, cos, sin, dims: int, traditional: bool):
    """x [rows, heads, D] by each row's angles."""
    out = x.copy()
    idx = np.arange(dims // 2)
    a, b = (2 * idx, 2 * idx + 1) if traditional else (idx, idx + dims // 2)
    c, s = cos[:, None, :], sin[:, None, :]
    out[..., a] = x[..., a] * c - x[..., b] * s
    out[..., b] = x[..., a] * s + x[..., b] * c
    return out


def _expected_inputs(weights: LayerWeights, dense, h, cos, sin, rope):
    x = _rms(h, weights.input_norm)

    def project(name: str, heads: int) -> np.ndarray:
        y = x @ dense[name].T
        if weights.biases[name] is not None:
            y = y + weights.biases[name]
        return y.reshape(len(h), heads, D)

    q, k, v = project("q", HEADS), project("k", KV_HEADS), project("v", KV_HEADS)
    if weights.q_norm is not None:
        q, k = _rms(q, weights.q_norm), _rms(k, weights.k_norm)
    q, k = _rotate(q, cos, sin, *rope), _rotate(k, cos, sin, *rope)
    return q, k.transpose(1, 0, 2), v.transpose(1, 0, 2)


def _expected_outputs(weights: LayerWeights, dense, h, attention):
    h = h + attention @ dense["o"].T
    x = _rms(h, weights.mlp_norm)
    g, u = x @ dense["gate"].T, x @ dense["up"].T
    return h + (g / (1 + np.exp(-g)) * u) @ dense["down"].T


def _angles(rows: int, dims: int) -> tuple[np.ndarray, np.ndarray]:
    angles = np.arange(rows, dtype=np.float32)[:, None] * 0.37 + np.arange(dims // 2) * 0.05
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


@pytest.mark.parametrize(
    ("biases", "head_norms", "rope"),
    [
        (False, False, (D, False)),
        (True, False, (D, False)),
        (False, True, (D, True)),
        (True, True, (D // 2, False)),
    ],
    ids=["llama", "qwen2", "qwen3-traditional", "partial-rotation"],
)
def test_it_computes_the_layer(biases, head_norms, rope):
    gemm = _build()
    rng = np.random.default_rng(7)
    layer, weights, dense = _layer(gemm, rng, biases=biases, head_norms=head_norms, rope=rope)
    rows = 5
    h = rng.standard_normal((rows, HIDDEN)).astype(np.float32)
    cos, sin = _angles(rows, rope[0])
    got = layer.inputs(h, cos, sin, threads=2, int8=False)
    for part, want in zip(got, _expected_inputs(weights, dense, h, cos, sin, rope), strict=True):
        np.testing.assert_allclose(part, want, rtol=1e-4, atol=1e-4)
    attention = rng.standard_normal((rows, HEADS * D)).astype(np.float32)
    out = layer.outputs(h, attention, threads=2, int8=False)
    np.testing.assert_allclose(out, _expected_outputs(weights, dense, h, attention), rtol=1e-4,
                               atol=1e-4)  # fmt: skip


@pytest.mark.parametrize(("march", "lanes", "int8"), BUILDS)
def test_a_rows_bits_are_its_own(march, lanes, int8):
    """Decoding computes a row alone, verification among a tree's: the same bits."""
    skip_unless_runnable(march)
    gemm = _build(march)
    rng = np.random.default_rng(11)
    layer, _, _ = _layer(gemm, rng, biases=True, head_norms=True, rope=(D, False))
    rows = 9
    h = rng.standard_normal((rows, HIDDEN)).astype(np.float32)
    cos, sin = _angles(rows, D)
    attention = rng.standard_normal((rows, HEADS * D)).astype(np.float32)
    for rounded in {False, int8}:
        every = layer.inputs(h, cos, sin, threads=2, int8=rounded)
        alone = layer.inputs(h[4:5], cos[4:5], sin[4:5], threads=1, int8=rounded)
        assert np.array_equal(alone[0][0], every[0][4])
        assert np.array_equal(alone[1][:, 0], every[1][:, 4])
        assert np.array_equal(alone[2][:, 0], every[2][:, 4])
        together = layer.outputs(h, attention, threads=2, int8=rounded)
        one = layer.outputs(h[4:5], attention[4:5], threads=1, int8=rounded)
        assert np.array_equal(one[0], together[4])


def test_a_rotation_wider_than_a_head_is_refused():
    gemm = _build()
    layer, _, _ = _layer(gemm, np.random.default_rng(0), biases=False, head_norms=False,
                         rope=(2 * D, False))  # fmt: skip
    cos, sin = _angles(1, 2 * D)
    with pytest.raises(ValueError, match="cannot run"):
        layer.inputs(np.ones((1, HIDDEN), np.float32), cos, sin, threads=1, int8=False)


def test_a_layer_in_panels_computes_the_row_layouts_and_a_rows_bits_are_its_own():
    """The AVX2 build's panels (quant_panels.c) in both calls: the row layout's values within
    float rounding, and a row's bits the same alone or among others."""
    skip_unless_runnable("x86-64-v3")
    gemm = _build("x86-64-v3")
    kinds = {}
    for panels in (False, True):
        rng = np.random.default_rng(13)
        layer, weights, _ = _layer(gemm, rng, biases=True, head_norms=True, rope=(D, False),
                                   panels=panels)  # fmt: skip
        assert all(m.panel == (8 if panels else 0) for m in weights.matrices.values())
        kinds[panels] = layer
    rng = np.random.default_rng(1)
    rows = 9
    h = rng.standard_normal((rows, HIDDEN)).astype(np.float32)
    cos, sin = _angles(rows, D)
    attention = rng.standard_normal((rows, HEADS * D)).astype(np.float32)
    inputs = {p: layer.inputs(h, cos, sin, threads=2, int8=True) for p, layer in kinds.items()}
    for got, want in zip(inputs[True], inputs[False], strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    outputs = {p: layer.outputs(h, attention, threads=2, int8=True) for p, layer in kinds.items()}
    np.testing.assert_allclose(outputs[True], outputs[False], rtol=1e-4, atol=1e-4)
    alone = kinds[True].inputs(h[4:5], cos[4:5], sin[4:5], threads=1, int8=True)
    assert np.array_equal(alone[0][0], inputs[True][0][4])
    assert np.array_equal(alone[1][:, 0], inputs[True][1][:, 4])
    one = kinds[True].outputs(h[4:5], attention[4:5], threads=1, int8=True)
    assert np.array_equal(one[0], outputs[True][4])
    with pytest.raises(ValueError, match="cannot run"):
        kinds[True].outputs(h, attention, threads=1, int8=False)
