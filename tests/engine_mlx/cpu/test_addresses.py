"""``address`` is ``array.ctypes.data`` for every kind of array the kernels are handed, taking
the fast path where the buffer allows it and numpy's otherwise."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from engine_mlx.cpu.addresses import address


def test_it_is_numpys_address_for_every_kind_of_array():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    frozen = a.copy()
    frozen.flags.writeable = False
    mlx_view = np.asarray(mx.ones((3, 5)))
    arrays = [a, a[1:], a[:, 2:], a[::-1], a[:, ::-1], a.T, a[::2], frozen, mlx_view,
              np.zeros((0, 3), np.float32), np.int32(7) * np.ones(3, np.int32)]  # fmt: skip
    assert all(address(x) == x.ctypes.data for x in arrays)
