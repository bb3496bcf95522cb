"""The numpy rotation equals MLX's ``fast.rope`` (both layouts, scaled positions, explicit
per-token positions), and only plain ``nn.RoPE`` is taken."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest

from engine_mlx.models.numpy_rope import NumpyRoPE


@pytest.mark.parametrize("traditional", [False, True])
@pytest.mark.parametrize(("dims", "base", "scale"), [(64, 1e6, 1.0), (32, 1e4, 0.5)])
def test_it_rotates_as_mlx_does(traditional, dims, base, scale):
    rope = nn.RoPE(dims, traditional=traditional, base=base, scale=scale)
    x = mx.random.normal((1, 3, 5, 64), key=mx.random.key(1))
    positions = np.array([7, 8, 8, 9, 300])  # tree nodes share a depth
    ours = NumpyRoPE(rope)(np.array(x), positions)
    theirs = rope(x.transpose(2, 1, 0, 3), offset=mx.array(positions)).transpose(2, 1, 0, 3)
    np.testing.assert_allclose(ours, np.array(theirs), rtol=2e-5, atol=2e-5)
    np.testing.assert_array_equal(ours[..., dims:], np.array(x)[..., dims:])  # left as it was


def test_only_plain_rope_is_taken():
    assert NumpyRoPE.takes(nn.RoPE(64))
    assert not NumpyRoPE.takes(nn.Linear(2, 2))
