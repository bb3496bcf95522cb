"""Load the row-by-row attention (``exact_attention.c``): a token's attention output has the
same bits whether it is decoded alone or verified in a tree of drafts.

Built like the other kernels (``small_gemm.library_path``: the system C compiler,
``-march=native``, cached per machine), loaded privately. Stdlib and numpy only.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine_mlx.cpu.addresses import address
from engine_mlx.cpu.small_gemm import library_path

SOURCE = Path(__file__).with_name("exact_attention.c")


@dataclass(frozen=True)
class Slots:
    """Every row's allowed cache slots as the C side reads them: row r's are
    ``idx[starts[r] : starts[r + 1]]``."""

    idx: np.ndarray
    starts: np.ndarray

    @staticmethod
    def of(allowed: list[np.ndarray]) -> Slots:
        starts = np.zeros(len(allowed) + 1, dtype=np.int32)
        starts[1:] = np.cumsum([len(a) for a in allowed])
        idx = np.ascontiguousarray(np.concatenate(allowed) if allowed else [], dtype=np.int32)
        return Slots(idx, starts)


class ExactAttention:
    def __init__(self, march: str = "native") -> None:
        self.library = ctypes.CDLL(str(library_path(march, SOURCE)), mode=ctypes.RTLD_LOCAL)
        self.library.ea_vector_width.restype = ctypes.c_int
        self.library.ea_attend.restype = ctypes.c_int
        self.library.ea_attend.argtypes = [
            *(ctypes.c_int,) * 4, *(ctypes.c_void_p,) * 3, ctypes.c_long,
            *(ctypes.c_void_p,) * 2, ctypes.c_long, ctypes.c_int,
            *(ctypes.c_void_p,) * 2, ctypes.c_float, ctypes.c_void_p, ctypes.c_int,
        ]  # fmt: skip
        self.library.ea_set_pool.argtypes = [ctypes.c_void_p]

    def use_pool(self, small_gemm: ctypes.CDLL) -> None:
        """Run on the float32 product's worker threads (its ``fc_parallel``)."""
        self.library.ea_set_pool(ctypes.cast(small_gemm.fc_parallel, ctypes.c_void_p))

    def vector_width(self) -> int:
        return self.library.ea_vector_width()

    def takes(self, head_dim: int) -> bool:
        return head_dim % self.vector_width() == 0 and head_dim <= 512

    def attend(
        self,
        queries: np.ndarray,
        keys: np.ndarray,
        values: np.ndarray,
        allowed: list[np.ndarray] | Slots,
        scale: float,
        threads: int = 1,
        new: tuple[np.ndarray, np.ndarray, int] | None = None,
    ) -> np.ndarray:
        """``queries`` [rows, heads, d]; ``keys``/``values`` [kv_heads, slots, d] (a strided
        view of a cache is fine: slots must be rows of d floats); ``allowed[r]``: the cache
        slots row r attends to, ascending (its positions in order), or ``Slots.of`` them (a
        forward's layers share them). ``new`` = (keys, values,
        split): slots from ``split`` on are these [kv_heads, n, d] rows instead (a forward's
        own, not yet in the cache). -> [rows, heads, d]."""
        q = np.ascontiguousarray(queries, dtype=np.float32)
        rows, heads, d = q.shape
        k, v = (self._cache_view(a, d) for a in (keys, values))
        if k.strides != v.strides:
            v = np.ascontiguousarray(v)
            k = np.ascontiguousarray(k)
        k2, v2, split = (k, v, np.iinfo(np.int32).max) if new is None else new
        k2, v2 = np.ascontiguousarray(k2, np.float32), np.ascontiguousarray(v2, np.float32)
        if k2.shape != v2.shape or k2.shape[0] != k.shape[0] or k2.shape[2] != d:
            raise ValueError(f"new rows of shape {k2.shape} do not fit a cache of {k.shape}")
        slots = allowed if isinstance(allowed, Slots) else Slots.of(allowed)
        idx, starts = slots.idx, slots.starts
        if len(starts) != rows + 1:
            raise ValueError(f"allowed slots for {len(starts) - 1} rows, queries for {rows}")
        out = np.empty_like(q)
        status = self.library.ea_attend(
            rows, heads, k.shape[0], d, address(q), address(k), address(v),
            k.strides[0] // 4, address(k2), address(v2), k2.strides[0] // 4, split,
            address(idx), address(starts), scale, address(out), threads,
        )  # fmt: skip
        if status == -2:
            raise MemoryError("no memory for the attention's scores")
        if status != 0:
            raise ValueError(f"no exact attention for heads of {d}")
        return out

    @staticmethod
    def _cache_view(a: np.ndarray, d: int) -> np.ndarray:
        if a.dtype != np.float32 or a.strides[1:] != (4 * d, 4) or a.strides[0] % 4:
            a = np.ascontiguousarray(a, dtype=np.float32)
        return a
