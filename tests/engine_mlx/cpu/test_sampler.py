"""The C filters (``sampler.c``) as built for narrower CPUs: the same tokens and probabilities as
the native build, and the request checked before a row is read. Their agreement with the
definition is ``tests/engine_mlx/decoding/test_sampling_filters.py``'s."""

from __future__ import annotations

import platform

import numpy as np
import pytest

from engine_mlx.cpu.sampler import Filters, HostSampler, host_sampler
from engine_mlx.cpu.small_gemm import BuildError

pytestmark = pytest.mark.skipif(host_sampler() is None, reason="the C filters did not build here")

ASKED = [
    Filters(0.7, 20, top_p=0.8, penalty=1.05),  # the app's defaults
    Filters(0.5, 3, min_p=0.2, penalty=0.8),  # a penalty below 1 raises logits
    Filters(0.7, top_p=0.9, penalty=1.3),  # no top-k: every token at or above one value
    Filters(1.2, min_p=0.05),
]


def _logits(ties: bool) -> np.ndarray:
    rng = np.random.default_rng(7)
    if ties:
        return (rng.integers(-4, 5, size=(5, 3001)) * 0.5).astype(np.float32)
    return rng.normal(0, 3, size=(5, 3001)).astype(np.float32)


def _run(sampler: HostSampler, x: np.ndarray, asked: Filters, dense: bool):
    seen = np.zeros(x.shape[1], dtype=np.uint8)
    seen[::37] = 1
    extra = np.arange(x.shape[0] * 3, dtype=np.int32).reshape(x.shape[0], 3)
    uniforms = np.linspace(0.05, 0.95, x.shape[0]).astype(np.float32)
    return sampler.run(
        x, asked, seen=seen, extra=extra, uniforms=None if dense else uniforms, dense=dense
    )


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 code paths")
@pytest.mark.parametrize("march", ["x86-64-v3", "x86-64"])
@pytest.mark.parametrize("ties", [True, False])
def test_the_narrower_builds_keep_the_same_tokens(march, ties):
    try:
        narrow = HostSampler(march)
    except (BuildError, OSError) as exc:
        pytest.skip(f"no {march} build here: {exc}")
    native, x = host_sampler(), _logits(ties)
    for asked in ASKED:
        drawn = _run(native, x, asked, dense=False), _run(narrow, x, asked, dense=False)
        full = _run(native, x, asked, dense=True).dense, _run(narrow, x, asked, dense=True).dense
        np.testing.assert_array_equal(np.isfinite(full[0]), np.isfinite(full[1]))
        np.testing.assert_allclose(np.exp(full[0]), np.exp(full[1]), atol=1e-6)
        if asked.top_k:  # the survivors' arithmetic is the same code: the same bits
            np.testing.assert_array_equal(drawn[0].ids, drawn[1].ids)
            np.testing.assert_array_equal(drawn[0].logprobs, drawn[1].logprobs)
            np.testing.assert_array_equal(drawn[0].tokens, drawn[1].tokens)


def test_a_token_outside_the_vocabulary_is_refused_before_any_row_is_read():
    x = np.zeros((2, 10), dtype=np.float32)
    sampler = host_sampler()
    with pytest.raises(ValueError, match="within the vocabulary"):
        sampler.run(x, Filters(1.0, 3, penalty=1.5), extra=np.array([[1], [10]]))
    with pytest.raises(ValueError, match="within the vocabulary"):
        sampler.run(x, Filters(1.0), forced=np.array([-1, -2]))
    with pytest.raises(ValueError, match="top-k"):
        sampler.run(x, Filters(1.0, 10))
    forced = sampler.run(x, Filters(1.0), forced=np.array([-1, 4]), dense=True).dense
    assert np.isfinite(forced[0]).all() and np.nonzero(np.isfinite(forced[1]))[0].tolist() == [4]


def test_a_strided_batch_reads_each_row_where_it_is():
    """Rows a stride apart (a slice of a wider array) give what the same rows packed give."""
    wide = _logits(ties=False)
    sampler, asked = host_sampler(), Filters(0.7, 20, top_p=0.8)
    strided = sampler.run(wide[::2], asked, dense=True).dense
    packed = sampler.run(np.ascontiguousarray(wide[::2]), asked, dense=True).dense
    np.testing.assert_array_equal(strided, packed)
