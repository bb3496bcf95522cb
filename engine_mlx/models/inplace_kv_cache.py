"""A key-value cache the numpy layers write into directly (``numpy_layers``).

Each layer of a forward through the numpy layers handed its new keys and values to mlx-lm's
``KVCache.update_and_fetch`` (two copies into MLX arrays, a lazy slice update) and the forward
ended by evaluating all of them: on the 2-core EPYC VM ~2.5 ms of a ~15 ms SmolLM2 token, for
a few kilobytes of rows. Here, where the cache's buffer has room and no one else holds it, the
rows are written straight into the buffer MLX allocated (a numpy view of it), and the offset
moves on: no MLX operation at all.

The buffer is written only while this cache is its only holder: handing out its ``state`` (a
prompt-cache snapshot) or adopting one (a restored cache) marks it lent, and the next rows then
take mlx-lm's update over new array objects, which copies the shared buffer, after which it is
this cache's alone again. (mlx-lm's own cache assigns into the very objects its ``state``
handed out, so a snapshot of it changes where the cache is trimmed below it and written.)
Room runs out every 256 tokens, where the update grows the buffer as before. Slices handed out
otherwise (``keys_and_values``) end at the offset they were cut at, and rows are written from
the offset on.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache


class InPlaceKVCache(KVCache):
    """mlx-lm's ``KVCache`` whose rows can be written in place (``write_rows``)."""

    # Class defaults: ``from_state`` builds caches without ``__init__``, from arrays a
    # snapshot still holds.
    _lent = True
    _pending = False

    def __init__(self) -> None:
        super().__init__()
        self._lent = False

    @property
    def state(self) -> tuple[Any, Any, int]:
        self._lent = True  # the caller may keep these arrays: never write them again
        return self.keys, self.values, self.offset

    @state.setter
    def state(self, value: tuple[Any, Any, int]) -> None:
        self.keys, self.values, self.offset = value
        self._lent = True  # adopted: the snapshot they came from still holds them

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[mx.array, mx.array]:
        if self._lent and self.keys is not None:
            # mlx-lm assigns into its arrays, which changes the very objects a snapshot holds:
            # new objects over the same buffers, so the update copies them instead
            self.keys, self.values = mx.array(self.keys), mx.array(self.values)
        out = super().update_and_fetch(keys, values)
        # MLX's update wrote in place only where the buffer had no other holder, and copied
        # otherwise: either way the result is this cache's alone, maybe a new buffer.
        self._lent = False
        self._pending = True
        return out

    def write_rows(
        self,
        keys: np.ndarray,
        values: np.ndarray,
        buffers: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> bool:
        """``keys`` and ``values`` [kv_heads, n, d] (float32) written at the offset, straight
        into the buffer (``buffers``: this cache's own, just taken); False, writing nothing,
        where that cannot be done (no buffer yet, no room, lent, another dtype or layout):
        ``update_and_fetch`` must."""
        if self._lent or self.keys is None:
            return False
        n = keys.shape[1]
        if self.offset + n > self.keys.shape[2] or self.keys.dtype != mx.float32:
            return False
        buffers = buffers or self.buffers()
        if any(b.shape[0] != 1 or not b.flags.writeable for b in buffers):
            return False
        end = self.offset + n
        buffers[0][0, :, self.offset : end] = keys
        buffers[1][0, :, self.offset : end] = values
        self.offset = end
        return True

    def buffers(self) -> tuple[np.ndarray, np.ndarray]:
        """numpy views of the keys' and values' buffers as they are now (evaluated). Taken
        anew each time, not kept: assigning into an MLX array (a tree's compaction does) can
        move the very same object to a new buffer."""
        if self._pending:
            mx.eval(*self.settle())
        return np.asarray(self.keys), np.asarray(self.values)

    def settle(self) -> list[mx.array]:
        """The arrays an MLX update left to evaluate (none after in-place writes)."""
        if not self._pending:
            return []
        self._pending = False
        return [self.keys, self.values]
