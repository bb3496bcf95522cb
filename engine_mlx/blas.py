"""Make MLX's CPU matrix products fast: the right BLAS, and a small-batch product before it.

On Linux, MLX's CPU wheel sends every fp32 product to the ``cblas_sgemm`` loaded globally
first, and its own bundled BLAS is slow. Before ``import mlx.core`` this module loads, in this
order, with ``RTLD_GLOBAL``:

1. the small-batch product (``cpu/small_gemm.c``, compiled here): it takes the products of
   1–32 rows (decoding and verification), reading each weight once;
2. the BLAS measured fastest on this machine (``cpu/choice``: MKL, OpenBLAS or BLIS), which
   takes every other product (prefill) — the small-batch product hands those on to it.

Loading them after MLX has no effect. Stdlib only, and run by ``engine_mlx/__init__`` on
import, so importing any part of the engine loads them first. On macOS nothing is loaded:
MLX uses Accelerate and Metal there.

``FLASHCHAT_BLAS`` forces a library (``openblas``, ``mkl``, ``blis``, or ``bundled`` for
MLX's own) and ``FLASHCHAT_SMALL_GEMM=0`` leaves the small-batch product out, for
side-by-side measurements.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from engine_mlx.cpu import libraries
from engine_mlx.cpu.choice import choose
from engine_mlx.cpu.small_gemm import MAX_ROWS, BuildError, SmallGemm, library_path

_WIDTHS = {16: "AVX-512", 8: "AVX2", 4: "128-bit vectors"}


@dataclass(frozen=True)
class BlasStatus:
    """What does MLX's CPU products in this process, and why; shown by ``info``, the status
    bar and the bench."""

    library: str  # "OpenBLAS 0.3.21", "MKL 2026.2", "MLX's bundled BLAS", …
    threads: int  # the BLAS's threads (0: unknown)
    reason: str  # why this library
    small_gemm: str  # "1–32 rows, AVX-512" or "off: <why>"
    loaded: bool  # False: MLX's own BLAS (or Accelerate) is in use

    def describe(self) -> str:
        threads = f", {self.threads} threads" if self.threads else ""
        return f"{self.library}{threads} ({self.reason}); small-batch product {self.small_gemm}"

    def summary(self) -> str:
        """One short phrase, for a status bar: "OpenBLAS 0.3.21 ×2 + small-batch product"."""
        threads = f" ×{self.threads}" if self.threads else ""
        small = "" if self.small_gemm.startswith("off") else " + small-batch product"
        return f"{self.library}{threads}{small}"


_status: BlasStatus | None = None
_small_gemm: SmallGemm | None = None


def preload() -> BlasStatus:
    """Load the small-batch product and the BLAS if we are on Linux, before MLX."""
    global _status
    if _status is None:
        _status = _preload()
    return _status


def status() -> BlasStatus:
    return preload()


def small_gemm() -> SmallGemm | None:
    """The loaded small-batch product (for its call counters), or None."""
    preload()
    return _small_gemm


@contextmanager
def blas_only() -> Iterator[None]:
    """Send every product to the BLAS for a while: the small-batch product's "before", measured
    in the same process as its "after"."""
    small = small_gemm()
    if small is not None:
        small.set_max_rows(0)
    try:
        yield
    finally:
        if small is not None:
            small.set_max_rows(MAX_ROWS)


def _preload() -> BlasStatus:
    if not sys.platform.startswith("linux"):
        return BlasStatus("Accelerate", 0, "MLX's own on this platform", "off: not needed", False)
    if "mlx.core" in sys.modules:
        return _bundled("too late: mlx.core was imported before engine_mlx", "off: too late")
    requested = os.environ.get("FLASHCHAT_BLAS", "auto").strip().lower() or "auto"
    if requested == "bundled":
        return _bundled("FLASHCHAT_BLAS=bundled", "off: FLASHCHAT_BLAS=bundled")
    candidates = libraries.available()
    small, small_state = _build_small_gemm()
    reason = ""
    if requested != "auto":
        forced = [c for c in candidates if c.name == requested]
        if forced:
            candidates, reason = forced, f"FLASHCHAT_BLAS={requested}"
        else:
            reason = f"FLASHCHAT_BLAS={requested} is not installed; "
    if not candidates:
        return _bundled(
            "no BLAS found: apt-get install libopenblas0-pthread", "off: no BLAS to hand on to"
        )
    if not reason or reason.endswith("; "):
        picked = choose(candidates, small is not None)
        reason += picked.reason
        candidates.sort(key=lambda c: c.name != picked.name)
    return _load(candidates, reason, small, small_state)


def _build_small_gemm() -> tuple[SmallGemm | None, str]:
    if os.environ.get("FLASHCHAT_SMALL_GEMM", "") == "0":
        return None, "off: FLASHCHAT_SMALL_GEMM=0"
    try:
        small = SmallGemm(library_path())  # loaded globally now, before any BLAS
    except (BuildError, OSError) as exc:
        return None, f"off: {exc}"
    width = _WIDTHS.get(small.vector_width(), f"{small.vector_width()} lanes")
    return small, f"1–{MAX_ROWS} rows, {width}"


def _load(
    candidates: list[libraries.Candidate],
    reason: str,
    small: SmallGemm | None,
    small_state: str,
) -> BlasStatus:
    global _small_gemm
    failures = []
    for candidate in candidates:
        try:
            loaded = libraries.load(candidate)
        except (OSError, AttributeError) as exc:
            failures.append(f"{candidate.label} did not load: {exc}")
            continue
        if small is not None:
            small.forward_to(loaded.library)
            _small_gemm = small
        if failures:
            reason = "; ".join(failures) + f"; {reason}"
        name = f"{candidate.label} {loaded.version}".strip()
        return BlasStatus(name, loaded.threads, reason, small_state, True)
    # Nothing loaded, but the small-batch product is global already: it keeps its products
    # and hands the rest to MLX's bundled BLAS (or, without one, computes them plainly).
    if small is not None:
        bundled = libraries.bundled()
        if bundled is not None:
            small.forward_to(bundled)
        _small_gemm = small
    return _bundled("; ".join(failures), small_state if small else "off")


def _bundled(reason: str, small_state: str) -> BlasStatus:
    return BlasStatus(libraries.LABELS["bundled"], 0, reason, small_state, False)
