"""Each kernel checks itself on the GPU where it first runs, and steps aside if it fails.

The kernels are compiled by the user's GPU driver at first use (Metal on a Mac, CUDA on
NVIDIA), on hardware and driver versions no test here has seen. A kernel that does not
compile, does not launch, or computes something else would otherwise break every reply, or
worse, change them silently. So the first call of each op on a kernel path runs the kernel and
the op's reference (MLX ops) on the same inputs and compares them: an op whose kernel raises
or disagrees is switched off for the process, runs its reference from then on (correct, only
slower), and ``switched_off`` says which and why (``info``, ``stats.kernels``). Inputs the
reference itself refuses are the caller's fault: that error is raised and nothing is switched
off. Every op's dispatch (``launch.dispatch``) consults it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import mlx.core as mx

T = TypeVar("T")

_lock = threading.Lock()  # for writes; a membership test reads under the GIL
_passed: set[str] = set()
_off: dict[str, str] = {}


def is_off(op: str) -> bool:
    """Whether ``op``'s kernel has been switched off in this process."""
    return op in _off


def has_passed(op: str) -> bool:
    """Whether ``op``'s kernel has passed its first-call check."""
    return op in _passed


def _arrays(result: Any) -> list[mx.array]:
    """The arrays of a result: an array, a tuple of them, or a dataclass holding them."""
    if isinstance(result, mx.array):
        return [result]
    if dataclasses.is_dataclass(result):
        result = [getattr(result, f.name) for f in dataclasses.fields(result)]
    return [a for a in result if isinstance(a, mx.array)]


def exact(got: Any, want: Any) -> bool:
    """Every array the same shape and values (token ids, counts, copied rows)."""
    pairs = zip(_arrays(got), _arrays(want), strict=True)
    return all(a.shape == b.shape and bool(mx.array_equal(a, b)) for a, b in pairs)


# About twice the loosest bound the kernels' own tests allow, relative to the largest value (at
# least 1): a kernel that computes something else is off by far more.
_TOLERANCE = {mx.float32: 2e-4, mx.float16: 4e-3, mx.bfloat16: 3.2e-2}


def close(got: Any, want: Any) -> bool:
    """Every array the same within its dtype's rounding, relative to its largest value."""
    for a, b in zip(_arrays(got), _arrays(want), strict=True):
        if a.shape != b.shape:
            return False
        a32, b32 = a.astype(mx.float32), b.astype(mx.float32)
        scale = max(1.0, mx.abs(b32).max().item()) if b.size else 1.0
        error = mx.abs(a32 - b32).max().item() if b.size else 0.0
        if not error <= _TOLERANCE.get(b.dtype, 2e-4) * scale:  # NaN disagrees too
            return False
    return True


def switched_off() -> dict[str, str]:
    """Op -> why its kernel was switched off, for ``info`` and ``stats.kernels``."""
    with _lock:
        return dict(_off)


def reset() -> None:
    """Forget every check (tests; a new kernel path)."""
    with _lock:
        _passed.clear()
        _off.clear()


def _switch_off(op: str, reason: str) -> None:
    with _lock:
        _off[op] = reason


def first_call(
    op: str, kernel: Callable[[], T], reference: Callable[[], T], agree: Callable[[Any, Any], bool]
) -> T:
    """The kernel's result if it runs and agrees with the reference; else the reference's,
    and the kernel switched off."""
    try:
        got = kernel()
        mx.eval(_arrays(got))
    except Exception as exc:  # a driver's compiler or launcher: any error means "not here"
        want = reference()  # raises for inputs that are wrong whatever runs them
        message = " ".join(str(exc).split()) or type(exc).__name__
        _switch_off(op, f"the kernel failed on its first call ({message[:200]})")
        return want
    want = reference()
    mx.eval(_arrays(want))
    if not agree(got, want):
        _switch_off(op, "the kernel disagreed with its reference on its first call")
        return want
    with _lock:
        _passed.add(op)
    return got
