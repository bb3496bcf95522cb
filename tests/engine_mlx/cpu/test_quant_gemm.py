"""The product over MLX's quantized weights: x @ dequantize(W)^T for every bit width and group
size MLX writes, a row's bits independent of the rows beside it, threads splitting the same
work, and the AVX2 and SSE builds computing the same products."""

from __future__ import annotations

import platform

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.cpu.quant_gemm import QuantGemm


@pytest.fixture(scope="module")
def product() -> QuantGemm:
    return QuantGemm()


def _quantized(rng, n: int, k: int, bits: int, group: int):
    w = rng.standard_normal((n, k)).astype(np.float32)
    packed, scales, biases = mx.quantize(mx.array(w), group_size=group, bits=bits)
    dense = np.array(mx.dequantize(packed, scales, biases, group_size=group, bits=bits))
    return np.array(packed), np.array(scales), np.array(biases), dense


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_it_is_the_product_with_the_dequantized_weights(product, bits, group):
    rng = np.random.default_rng(bits * 1000 + group)
    packed, scales, biases, dense = _quantized(rng, 70, 384, bits, group)
    x = rng.standard_normal((9, 384)).astype(np.float32)
    got = product.multiply(x, packed, scales, biases, bits=bits, group=group)
    reference = x.astype(np.float64) @ dense.T.astype(np.float64)
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bits", [4, 8])
def test_a_rows_bits_do_not_depend_on_the_rows_beside_it(product, bits):
    """Plain decoding multiplies one row, verification up to 32: the same bits for a row."""
    rng = np.random.default_rng(5)
    packed, scales, biases, _ = _quantized(rng, 37, 256, bits, 64)
    x = rng.standard_normal((32, 256)).astype(np.float32)
    every = product.multiply(x, packed, scales, biases, bits=bits, group=64)
    for rows in (1, 2, 3, 5, 8, 31):
        some = product.multiply(x[:rows], packed, scales, biases, bits=bits, group=64)
        assert np.array_equal(some, every[:rows]), rows
    split = product.multiply(x, packed, scales, biases, bits=bits, group=64, threads=2)
    assert np.array_equal(split, every)


def test_shapes_the_layout_cannot_hold_are_refused(product):
    rng = np.random.default_rng(1)
    packed, scales, biases, _ = _quantized(rng, 8, 128, 4, 64)
    with pytest.raises(ValueError, match="do not hold"):
        product.multiply(np.zeros((1, 64), np.float32), packed, scales, biases, bits=4, group=64)
    with pytest.raises(ValueError, match="m=33"):
        product.multiply(np.zeros((33, 128), np.float32), packed, scales, biases, bits=4, group=64)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 code paths")
@pytest.mark.parametrize(("march", "lanes"), [("x86-64-v3", 8), ("x86-64", 4)])
def test_the_narrower_builds_compute_the_same_products(march, lanes):
    build = QuantGemm(march)
    assert build.vector_width() == lanes
    rng = np.random.default_rng(3)
    for bits in (4, 8):
        packed, scales, biases, dense = _quantized(rng, 21, 256, bits, 32)
        x = rng.standard_normal((6, 256)).astype(np.float32)
        got = build.multiply(x, packed, scales, biases, bits=bits, group=32)
        np.testing.assert_allclose(got, x @ dense.T, rtol=1e-4, atol=1e-4)
        one = build.multiply(x[:1], packed, scales, biases, bits=bits, group=32)
        assert np.array_equal(one[0], got[0])
