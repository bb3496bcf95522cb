"""4-bit weights stored in panels of eight rows (quant_panels.c, the AVX2 build's int8 path):
the product within the int8 rounding bound and equal to the row layout's within float
rounding, a row's bits independent of the rows and threads beside it, the rows and
dequantized weights the row layout's exactly, and the cases the layout cannot take kept in
MLX's rows or refused."""

from __future__ import annotations

import numpy as np
import pytest

from engine_mlx.cpu.quant_gemm import QuantGemm, from_panels, to_panels
from tests.engine_mlx.cpu.builds import skip_unless_runnable
from tests.engine_mlx.cpu.test_quant_gemm import BUILDS, _quantized, _rounding_bound

PANEL_WIDTHS = {"x86-64": 0, "x86-64-v3": 8, "skylake-avx512": 8, "cascadelake": 0}


@pytest.fixture(scope="module")
def avx2() -> QuantGemm:
    skip_unless_runnable("x86-64-v3")
    return QuantGemm("x86-64-v3")


@pytest.mark.parametrize(("march", "lanes", "int8"), BUILDS)
def test_the_builds_with_avx2_int8_products_store_panels(march, lanes, int8):
    """AVX2's int8 path (also AVX-512 without VNNI) multiplies panels; VNNI and SSE keep rows."""
    skip_unless_runnable(march)
    assert QuantGemm(march).panel_width() == PANEL_WIDTHS[march]


def test_panels_are_a_reordering_of_the_rows():
    rows = np.arange(16 * 6, dtype=np.uint32).reshape(16, 6)
    panels = to_panels(rows, 8)
    assert panels.shape == rows.shape
    assert list(panels.ravel()[:9]) == [0, 6, 12, 18, 24, 30, 36, 42, 1]  # word 0 of rows 0-7
    assert np.array_equal(from_panels(panels, 8), rows)


@pytest.mark.parametrize("half", [False, True], ids=["float32-scales", "float16-scales"])
@pytest.mark.parametrize(("group", "k"), [(32, 160), (64, 896), (128, 384)])
def test_the_product_is_the_row_layouts_within_float_rounding(avx2, group, k, half):
    """k = 160 ends in a partial chunk of x's int8 view; groups of 128 span four pair sums."""
    rng = np.random.default_rng(group + k)
    packed, scales, biases, dense = _quantized(rng, 40, k, 4, group, half)
    rows = avx2.matrix(packed, scales, biases, bits=4, group=group)
    panels = avx2.matrix(packed, scales, biases, bits=4, group=group, panels=True)
    assert (rows.panel, panels.panel, panels.half) == (0, 8, half)
    x = rng.standard_normal((7, k)).astype(np.float32)
    x[0, 3] = 40.0  # an outlier coarsens its group's rounding
    got, want = panels.multiply(x, threads=2), rows.multiply(x, threads=2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    exact = x.astype(np.float64) @ dense.T.astype(np.float64)
    bound = _rounding_bound(x, scales, biases, dense, 4, group)
    slack = 1e-4 * np.abs(x).sum(1, keepdims=True) * np.abs(dense).max()
    assert np.all(np.abs(got - exact) <= bound + slack)


def test_a_rows_bits_do_not_depend_on_the_rows_or_threads_beside_it(avx2):
    rng = np.random.default_rng(5)
    packed, scales, biases, _ = _quantized(rng, 48, 256, 4, 64, half=True)
    matrix = avx2.matrix(packed, scales, biases, bits=4, group=64, panels=True)
    x = rng.standard_normal((70, 256)).astype(np.float32)
    every = matrix.multiply(x)
    for rows in (1, 2, 3, 4, 5, 8, 31):
        assert np.array_equal(matrix.multiply(x[:rows], threads=2), every[:rows]), rows
    assert np.array_equal(matrix.multiply(x, threads=2), every)


def test_dequantized_rows_and_chosen_rows_are_the_row_layouts(avx2):
    """Prefill unpacks runs of rows for the BLAS, a draft head takes chosen rows: both exactly
    what the row layout gives."""
    rng = np.random.default_rng(9)
    packed, scales, biases, _ = _quantized(rng, 64, 192, 4, 32, half=True)
    rows = avx2.matrix(packed, scales, biases, bits=4, group=32)
    panels = avx2.matrix(packed, scales, biases, bits=4, group=32, panels=True)
    want = rows.dequantize(0, np.empty((64, 192), np.float32))
    assert np.array_equal(panels.dequantize(0, np.empty((64, 192), np.float32), threads=2), want)
    assert np.array_equal(panels.dequantize(16, np.empty((13, 192), np.float32)), want[16:29])
    with pytest.raises(ValueError, match="multiple of 8"):
        panels.dequantize(13, np.empty((8, 192), np.float32))
    x = rng.standard_normal((3, 192)).astype(np.float32)
    for ids in (np.array([5, 63, 0, 17, 17, 40, 2, 9]), np.array([3, 50, 7])):
        chosen = panels.rows(ids)
        assert chosen.panel == (8 if len(ids) % 8 == 0 else 0)
        unpacked = chosen.dequantize(0, np.empty((len(ids), 192), np.float32))
        assert np.array_equal(unpacked, want[ids])
        np.testing.assert_allclose(chosen.multiply(x), rows.multiply(x)[:, ids], rtol=1e-5,
                                   atol=1e-4)  # fmt: skip


def test_what_panels_cannot_take_keeps_the_row_layout_or_is_refused(avx2):
    rng = np.random.default_rng(3)
    packed, scales, biases, _ = _quantized(rng, 20, 128, 4, 64)
    assert avx2.matrix(packed, scales, biases, bits=4, group=64, panels=True).panel == 0  # 20 rows
    packed, scales, biases, _ = _quantized(rng, 16, 128, 8, 64)
    assert avx2.matrix(packed, scales, biases, bits=8, group=64, panels=True).panel == 0  # 8 bits
    packed, scales, biases, _ = _quantized(rng, 16, 128, 4, 64)
    panels = avx2.matrix(packed, scales, biases, bits=4, group=64, panels=True)
    with pytest.raises(ValueError, match="int8 activations only"):
        panels.multiply(np.ones((1, 128), np.float32), int8=False)
