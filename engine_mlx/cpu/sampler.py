"""Load the sampler's filters in C (``sampler.c``): a row's penalty, top-k, temperature, top-p,
min-p and draw in one pass over its logits.

MLX on the CPU runs each op alone and unvectorised: the sampler's dozen passes over a 151,936-
token vocabulary took ~6 ms of a ~19 ms step, and a verification's rows as many times over.
Built like the other kernels (``small_gemm.library_path``: the system C compiler,
``-march=native``, cached per machine), loaded privately, on the float32 product's threads.
Stdlib and numpy only.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine_mlx import blas
from engine_mlx.cpu.small_gemm import BuildError, library_path

SOURCE = Path(__file__).with_name("sampler.c")


class _Request(ctypes.Structure):
    """``request`` in sampler.c, field for field."""

    _fields_ = [
        ("logits", ctypes.c_void_p),
        ("stride", ctypes.c_long),
        ("rows", ctypes.c_int),
        ("vocab", ctypes.c_int),
        ("seen", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
        ("n_extra", ctypes.c_int),
        ("forced", ctypes.c_void_p),
        ("penalty", ctypes.c_float),
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("uniforms", ctypes.c_void_p),
        ("tokens", ctypes.c_void_p),
        ("ids", ctypes.c_void_p),
        ("logprobs", ctypes.c_void_p),
        ("dense", ctypes.c_void_p),
        ("failed", ctypes.c_int),
    ]


@dataclass(frozen=True)
class Filters:
    """What the C side is asked to apply (``SamplingParams`` less the seed): ``top_k`` 0 or
    below the vocabulary, ``temperature`` above 0."""

    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    penalty: float = 1.0


@dataclass(frozen=True)
class Filtered:
    """Per row: the drawn token (when uniforms were given), the top-k survivors best first
    with their log-probabilities (with top-k), the distribution over the vocabulary (when
    asked for)."""

    tokens: np.ndarray | None  # [rows] int32
    ids: np.ndarray | None  # [rows, k] int32
    logprobs: np.ndarray | None  # [rows, k] float32, -inf where removed
    dense: np.ndarray | None  # [rows, vocab] float32


def _address(array: np.ndarray | None) -> int | None:
    return None if array is None else array.ctypes.data


class HostSampler:
    def __init__(self, march: str = "native") -> None:
        self.library = ctypes.CDLL(str(library_path(march, SOURCE)), mode=ctypes.RTLD_LOCAL)
        self.library.fs_sample.restype = ctypes.c_int
        self.library.fs_sample.argtypes = [ctypes.POINTER(_Request)]
        self.library.fs_set_pool.argtypes = [ctypes.c_void_p]

    def use_pool(self, small_gemm: ctypes.CDLL) -> None:
        """Run on the float32 product's worker threads (its ``fc_parallel``)."""
        self.library.fs_set_pool(ctypes.cast(small_gemm.fc_parallel, ctypes.c_void_p))

    def run(
        self,
        logits: np.ndarray,
        filters: Filters,
        *,
        seen: np.ndarray | None = None,
        extra: np.ndarray | None = None,
        forced: np.ndarray | None = None,
        uniforms: np.ndarray | None = None,
        dense: bool = False,
    ) -> Filtered:
        """``logits`` [rows, vocab] float32; ``seen`` [vocab] uint8 (1: a token of the
        committed context), ``extra`` [rows, n] int32 (each row's further context), both
        penalised once; ``forced`` [rows] int32 (the row's only token, or -1); ``uniforms``
        [rows] float32 in [0, 1): draw a token per row."""
        rows, vocab = logits.shape
        if logits.dtype != np.float32 or logits.strides[1] != 4:
            logits = np.ascontiguousarray(logits, dtype=np.float32)
        if not 0 <= filters.top_k < vocab or filters.temperature <= 0:
            raise ValueError("top-k must be below the vocabulary and the temperature above 0")
        k = filters.top_k
        checked = [
            None if a is None else np.ascontiguousarray(a, dtype=t)
            for a, t in ((seen, np.uint8), (extra, np.int32), (forced, np.int32))
        ]
        seen, extra, forced = checked
        if seen is not None and seen.shape != (vocab,):
            raise ValueError("seen is one flag per token")
        if extra is not None and (extra.shape[0] != rows or extra.ndim != 2):
            raise ValueError("extra is [rows, n]")
        if uniforms is not None:
            uniforms = np.ascontiguousarray(uniforms, dtype=np.float32)
        tokens = np.empty(rows, np.int32) if uniforms is not None else None
        ids = np.empty((rows, k), np.int32) if k else None
        logprobs = np.empty((rows, k), np.float32) if k else None
        out = np.empty((rows, vocab), np.float32) if dense else None
        request = _Request(
            _address(logits), logits.strides[0] // 4, rows, vocab,
            _address(seen), _address(extra), 0 if extra is None else extra.shape[1],
            _address(forced), filters.penalty, filters.temperature, k, filters.top_p,
            filters.min_p, _address(uniforms), _address(tokens), _address(ids),
            _address(logprobs), _address(out), 0,
        )  # fmt: skip
        status = self.library.fs_sample(ctypes.byref(request))
        if status == -2:
            raise ValueError("token ids must be within the vocabulary")
        if status != 0:
            raise MemoryError("the sampler could not allocate its buffers")
        return Filtered(tokens, ids, logprobs, out)


@functools.cache
def host_sampler() -> HostSampler | None:
    """The compiled filters, on the float32 product's threads; None where they cannot build."""
    try:
        sampler = HostSampler()
    except (BuildError, OSError):
        return None
    small = blas.small_gemm()
    if small is not None:
        sampler.use_pool(small.library)
    return sampler
