"""The product over MLX's quantized weights: with float activations, x @ dequantize(W)^T for
every bit width and group size MLX writes; with int8 activations (AVX-512 VNNI and AVX2
builds), within the rounding bound stated in quant_gemm.c; either way a row's bits independent
of the rows and threads beside it. Every build this CPU can run is checked: AVX2, SSE, AVX-512
without VNNI (int8 through AVX2) and with it."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.cpu.quant_gemm import HalfMatrix, QuantGemm
from engine_mlx.cpu.quantized_product import product as shared_product
from tests.engine_mlx.cpu.builds import skip_unless_runnable

BUILDS = [  # -march, float lanes, int8 activations
    ("x86-64", 4, False),
    ("x86-64-v3", 8, True),
    ("skylake-avx512", 16, True),
    ("cascadelake", 16, True),
]


@pytest.fixture(scope="module")
def product() -> QuantGemm:
    gemm = shared_product()
    assert gemm is not None
    return gemm


def _quantized(rng, n: int, k: int, bits: int, group: int, half: bool = False):
    """Random weights quantized; ``half``: as a float16 model is (scales and biases float16
    values, handed over as float32 like the engine's loaded models)."""
    w = mx.array(rng.standard_normal((n, k)).astype(np.float32))
    packed, scales, biases = mx.quantize(w.astype(mx.float16) if half else w, group, bits)
    scales, biases = scales.astype(mx.float32), biases.astype(mx.float32)
    dense = np.array(mx.dequantize(packed, scales, biases, group_size=group, bits=bits))
    return np.array(packed), np.array(scales), np.array(biases), dense


def _rounding_bound(x, scales, biases, dense, bits: int, group: int) -> np.ndarray:
    """quant_gemm.c's bound: sum over groups of |scale| * d / 2 * sum |q - middle|, with d
    = max|x| / 127 per row and group."""
    n, k = dense.shape
    q = (dense - np.repeat(biases, group, 1)) / np.repeat(scales, group, 1)
    middle = 8 if bits == 4 else 128
    spread = np.abs(np.rint(q) - middle).reshape(n, k // group, group).sum(-1)
    steps = np.abs(x).reshape(len(x), k // group, group).max(-1) / 127
    return np.einsum("mg,ng->mn", steps / 2, np.abs(scales) * spread)


@pytest.mark.parametrize("half", [False, True], ids=["float32-scales", "float16-scales"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_with_float_activations_it_is_the_product_with_the_dequantized_weights(
    product, bits, group, half
):
    rng = np.random.default_rng(bits * 1000 + group)
    packed, scales, biases, dense = _quantized(rng, 70, 384, bits, group, half)
    assert product.matrix(packed, scales, biases, bits=bits, group=group).half == half
    x = rng.standard_normal((9, 384)).astype(np.float32)
    got = product.multiply(x, packed, scales, biases, bits=bits, group=group, int8=False)
    reference = x.astype(np.float64) @ dense.T.astype(np.float64)
    np.testing.assert_allclose(got, reference, rtol=1e-4, atol=1e-4)


def _assert_within_the_rounding_bound(
    build: QuantGemm, bits: int, group: int, k: int, half: bool = False
) -> None:
    rng = np.random.default_rng(bits + k)
    packed, scales, biases, dense = _quantized(rng, 37, k, bits, group, half)
    x = rng.standard_normal((5, k)).astype(np.float32)
    x[0, 3] = 40.0  # an outlier coarsens its group's rounding, and the bound with it
    got = build.multiply(x, packed, scales, biases, bits=bits, group=group)
    exact = x.astype(np.float64) @ dense.T.astype(np.float64)
    bound = _rounding_bound(x, scales, biases, dense, bits, group)
    slack = 1e-4 * np.abs(x).sum(1, keepdims=True) * np.abs(dense).max()  # float rounding
    assert np.all(np.abs(got - exact) <= bound + slack)
    assert np.abs(got - exact).max() > 1e-3  # the rounding is there: this is the int8 path


@pytest.mark.parametrize("half", [False, True], ids=["float32-scales", "float16-scales"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize(("group", "k"), [(32, 160), (64, 896), (128, 384)])
def test_int8_activations_stay_within_the_rounding_bound(product, bits, group, k, half):
    """k = 160 ends in a partial chunk; 8 bits in groups of 128 spread a group over two."""
    if not product.int8_activations():
        pytest.skip("this build keeps activations float (no AVX2 or AVX-512 VNNI)")
    _assert_within_the_rounding_bound(product, bits, group, k, half)


@pytest.mark.parametrize("half", [False, True], ids=["float32-scales", "float16-scales"])
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("int8", [True, False])
def test_a_rows_bits_do_not_depend_on_the_rows_or_threads_beside_it(product, bits, int8, half):
    """Plain decoding multiplies one row, verification up to 32, prefill more: the same bits
    for a row, however the threads split the columns."""
    rng = np.random.default_rng(5)
    packed, scales, biases, _ = _quantized(rng, 37, 256, bits, 64, half)
    x = rng.standard_normal((70, 256)).astype(np.float32)
    every = product.multiply(x, packed, scales, biases, bits=bits, group=64, int8=int8)
    for rows in (1, 2, 3, 5, 8, 31):
        some = product.multiply(x[:rows], packed, scales, biases, bits=bits, group=64, int8=int8)
        assert np.array_equal(some, every[:rows]), rows
    split = product.multiply(x, packed, scales, biases, bits=bits, group=64, threads=2, int8=int8)
    assert np.array_equal(split, every)


def test_shapes_the_layout_cannot_hold_are_refused(product):
    rng = np.random.default_rng(1)
    packed, scales, biases, _ = _quantized(rng, 8, 128, 4, 64)
    with pytest.raises(ValueError, match="does not meet"):
        product.multiply(np.zeros((1, 64), np.float32), packed, scales, biases, bits=4, group=64)
    with pytest.raises(ValueError, match="do not hold"):
        product.multiply(np.zeros((1, 64), np.float32), packed, scales, biases, bits=8, group=64)
    with pytest.raises(ValueError, match="3 bits"):
        product.matrix(packed, scales, biases, bits=3, group=64)


@pytest.mark.parametrize(("march", "lanes", "int8"), BUILDS)
def test_the_other_builds_compute_the_same_products(march, lanes, int8):
    """Each build's float product is the dequantized weights'; its int8 product keeps the
    bound; a row's bits are its own."""
    skip_unless_runnable(march)
    build = QuantGemm(march)
    assert build.vector_width() == lanes
    assert build.int8_activations() == int8
    rng = np.random.default_rng(3)
    for bits, half in ((4, False), (8, False), (4, True), (8, True)):
        packed, scales, biases, dense = _quantized(rng, 21, 256, bits, 32, half)
        x = rng.standard_normal((6, 256)).astype(np.float32)
        got = build.multiply(x, packed, scales, biases, bits=bits, group=32, int8=False)
        np.testing.assert_allclose(got, x @ dense.T, rtol=1e-4, atol=1e-4)
        for path in (False, True):
            every = build.multiply(x, packed, scales, biases, bits=bits, group=32, int8=path)
            one = build.multiply(x[:1], packed, scales, biases, bits=bits, group=32, int8=path)
            assert np.array_equal(one[0], every[0])
        if int8:
            _assert_within_the_rounding_bound(build, bits, 32, 160, half)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group", [32, 64, 128])
def test_dequantized_rows_are_mlxs(product, bits, group):
    """Prefill multiplies by float32 rows of W through the BLAS: any run of rows, unpacked as
    mx.dequantize does (within the rounding of one fused multiply-add)."""
    rng = np.random.default_rng(bits + group)
    packed, scales, biases, dense = _quantized(rng, 40, 256, bits, group)
    matrix = product.matrix(packed, scales, biases, bits=bits, group=group)
    every = matrix.dequantize(0, np.empty((40, 256), np.float32), threads=2)
    np.testing.assert_allclose(every, dense, rtol=1e-6, atol=1e-6)
    some = matrix.dequantize(13, np.empty((9, 256), np.float32))
    np.testing.assert_array_equal(some, every[13:22])
    with pytest.raises(ValueError, match="not within"):
        matrix.dequantize(35, np.empty((9, 256), np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        matrix.dequantize(0, np.empty((256, 9), np.float32).T)


@pytest.mark.parametrize("bits", [4, 8])
def test_a_row_shorter_than_a_chunk_reads_only_its_own_groups(product, bits):
    """64 columns in groups of 32 fill half of a 4-bit chunk: the product must not read the
    scales past the last row's two groups (here NaN, as unmapped memory may hold)."""
    rng = np.random.default_rng(7)
    packed, scales, biases, dense = _quantized(rng, 12, 64, bits, 32)
    poisoned = np.full(scales.size + 32, np.nan, np.float32)
    poisoned[: scales.size] = scales.ravel()
    tail_scales = poisoned[: scales.size].reshape(scales.shape)  # NaN right after it
    x = rng.standard_normal((3, 64)).astype(np.float32)
    got = product.multiply(x, packed, tail_scales, biases, bits=bits, group=32)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, x @ dense.T, rtol=0.05, atol=0.2)  # x rounded to int8


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("int8", [True, False])
def test_float16_scales_give_the_bits_of_their_float32_copies(product, bits, int8):
    """Holding a float16 model's scales and biases as float16 changes the bytes read, not the
    arithmetic: the products and the dequantized rows are bit for bit those of float32."""
    rng = np.random.default_rng(bits + 17)
    packed, scales, biases, _ = _quantized(rng, 45, 416, bits, 32, half=True)
    x = rng.standard_normal((6, 416)).astype(np.float32)
    halves = product.matrix(packed, scales, biases, bits=bits, group=32)
    floats = product.matrix(packed, scales, biases, bits=bits, group=32, half=False)
    assert halves.half and not floats.half
    got, want = (m.multiply(x, threads=2, int8=int8) for m in (halves, floats))
    assert np.array_equal(got, want)
    rows = [m.dequantize(7, np.empty((38, 416), np.float32)) for m in (halves, floats)]
    assert np.array_equal(*rows)


@pytest.mark.parametrize(("march", "lanes", "int8"), BUILDS)
def test_float16_weights_multiply_as_float32_with_each_rows_bits_its_own(march, lanes, int8):
    """A float16 checkpoint's weights (bits 16): the product is x @ W^T within float32
    rounding, on every build; a row's bits do not depend on the rows or threads beside it."""
    skip_unless_runnable(march)
    build = QuantGemm(march)
    rng = np.random.default_rng(16)
    weights = rng.standard_normal((70, 192)).astype(np.float16)
    x = rng.standard_normal((9, 192)).astype(np.float32)
    matrix = HalfMatrix(build, weights.astype(np.float32))  # float32 holding float16 values
    assert (matrix.bits, matrix.n, matrix.k) == (16, 70, 192)
    every = matrix.multiply(x, threads=2, int8=True)  # int8 does not apply to float weights
    want = x.astype(np.float64) @ weights.astype(np.float64).T
    np.testing.assert_allclose(every, want, rtol=1e-5, atol=1e-5)
    for rows in (1, 2, 5):
        assert np.array_equal(matrix.multiply(x[:rows]), every[:rows])
    unpacked = matrix.dequantize(3, np.empty((4, 192), np.float32))
    assert np.array_equal(unpacked, weights[3:7].astype(np.float32))
    assert np.array_equal(matrix.rows(np.array([5, 1])).multiply(x), every[:, [5, 1]])


def test_weights_that_are_not_float16_values_are_refused(product):
    rng = np.random.default_rng(2)
    with pytest.raises(ValueError, match="not float16 values"):
        HalfMatrix(product, rng.standard_normal((8, 64)).astype(np.float32))
    with pytest.raises(ValueError, match="shape"):
        HalfMatrix(product, np.zeros((8, 60), np.float16))  # not whole vectors
