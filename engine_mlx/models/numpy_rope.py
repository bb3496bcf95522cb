"""Rotary position embedding in numpy, for forwards that have left MLX's graph anyway.

On the CPU, ``mx.fast.rope`` over one token's queries (14 heads of 64) took 64 us here, most of
it MLX's dispatch; the queries of a quantized target come straight from the engine's own product
(``models.quantized``), already evaluated, and numpy rotates them in a few microseconds. Only
mlx-lm's plain ``nn.RoPE`` is taken (dims, traditional or not, base, scale); scaled variants
keep MLX's. The same code rotates every row whatever the number of tokens, so plain decoding
and verification agree bit for bit.
"""

from __future__ import annotations

import mlx.nn as nn
import numpy as np


class NumpyRoPE:
    """The rotation of one ``nn.RoPE``, its frequencies computed once."""

    def __init__(self, rope: nn.RoPE) -> None:
        self.dims, self.traditional, self.scale = rope.dims, rope.traditional, rope.scale
        exponents = np.arange(0, self.dims // 2, dtype=np.float64) * 2.0 / self.dims
        self.frequencies = (float(rope.base) ** -exponents).astype(np.float32)
        # equal for rotations that turn rows alike (every layer of a model, usually)
        self.key = (self.dims, self.traditional, self.scale, self.frequencies.tobytes())

    @staticmethod
    def takes(rope: object) -> bool:
        return type(rope) is nn.RoPE

    def tables(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos and sin of each token's angles, [L, dims / 2] float32 (C-contiguous)."""
        angles = (positions.astype(np.float32) * np.float32(self.scale))[:, None] * self.frequencies
        return np.cos(angles), np.sin(angles)

    def __call__(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """``x`` [..., L, D] rotated by each token's position (``positions`` [L])."""
        cos, sin = self.tables(positions)
        half, out = self.dims // 2, x.copy()
        if self.traditional:
            first, second = x[..., 0 : self.dims : 2], x[..., 1 : self.dims : 2]
            out[..., 0 : self.dims : 2] = first * cos - second * sin
            out[..., 1 : self.dims : 2] = first * sin + second * cos
        else:
            first, second = x[..., :half], x[..., half : self.dims]
            out[..., :half] = first * cos - second * sin
            out[..., half : self.dims] = first * sin + second * cos
        return out
