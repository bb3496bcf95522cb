"""Running a kernel launch: on MLX's Metal or CUDA backend, or in the CPU emulator.

An op describes each kernel call as a ``Launch`` (kernel name, inputs in the order the
kernel's signature declares them, output shapes and dtypes, grid and threadgroup in threads,
template arguments), and hands it to an executor. The GPU executors build the
``mx.fast.metal_kernel`` / ``mx.fast.cuda_kernel`` object once per kernel from the .metal
file's body and the backend's prelude; the emulator executor runs the same body on the CPU
(tests). Grids are whole numbers of threadgroups in every dimension, so Metal's
``dispatchThreads`` and CUDA's blocks launch the same threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import mlx.core as mx
import numpy as np

import engine_mlx.kernels.self_check as self_check
from engine_mlx.backend import KERNEL_SWITCH, kernel_path
from metal_kernels import sources

ENV_SWITCH = KERNEL_SWITCH
TemplateArg = tuple[str, "mx.Dtype | int | bool"]
T = TypeVar("T")


def live_backend() -> str | None:
    """ "metal" or "cuda" when the kernels run on that live MLX backend; else None."""
    path = kernel_path()
    return path if path in ("metal", "cuda") else None


class _Calls:
    """How often each op ran its kernel ("calls") and, on a kernel path, how often it fell
    back to its reference (shapes the kernel does not take), process-wide."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.fallbacks: dict[str, int] = {}

    def record(self, op: str, kernel: bool) -> None:
        with self._lock:
            table = self.calls if kernel or kernel_path() == "reference" else self.fallbacks
            table[op] = table.get(op, 0) + 1

    def snapshot(self) -> tuple[dict[str, int], dict[str, int]]:
        with self._lock:
            return dict(self.calls), dict(self.fallbacks)


CALLS = _Calls()


def record(op: str, kernel: bool) -> None:
    """Count one call of ``op`` (``kernel``: its kernel ran, else its reference)."""
    CALLS.record(op, kernel)


def calls_since(before: tuple[dict[str, int], dict[str, int]]) -> dict[str, object]:
    """``stats.kernels``: the path and the calls per op since ``before`` (a snapshot)."""
    now_calls, now_fallbacks = CALLS.snapshot()
    old_calls, old_fallbacks = before
    calls = {k: v - old_calls.get(k, 0) for k, v in now_calls.items() if v > old_calls.get(k, 0)}
    fallbacks = {
        k: v - old_fallbacks.get(k, 0)
        for k, v in now_fallbacks.items()
        if v > old_fallbacks.get(k, 0)
    }
    out: dict[str, object] = {"path": kernel_path(), "calls": dict(sorted(calls.items()))}
    if fallbacks:
        out["fallbacks"] = dict(sorted(fallbacks.items()))
    if off := self_check.switched_off():
        out["switched_off"] = dict(sorted(off.items()))
    return out


@dataclass(frozen=True)
class Launch:
    kernel: str
    inputs: Sequence[mx.array]
    output_shapes: Sequence[tuple[int, ...]]
    output_dtypes: Sequence[mx.Dtype]
    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    template: Sequence[TemplateArg] = field(default_factory=tuple)
    init_value: float | None = None

    def __post_init__(self) -> None:
        for g, t in zip(self.grid, self.threadgroup, strict=True):
            if t <= 0 or g < t or g % t:
                raise ValueError(
                    f"{self.kernel}: grid {self.grid} is not a whole number of "
                    f"threadgroups {self.threadgroup}"
                )


class Executor(Protocol):
    name: str

    def __call__(self, launch: Launch) -> list[mx.array]: ...


class GpuExecutor:
    """Runs launches through ``mx.fast.metal_kernel`` or ``mx.fast.cuda_kernel``."""

    def __init__(self, backend: str) -> None:
        if backend not in ("metal", "cuda"):
            raise ValueError(f"no GPU backend named {backend!r}")
        self.name = backend
        self._kernels: dict[str, Callable[..., list[mx.array]]] = {}

    def _build(self, name: str) -> Callable[..., list[mx.array]]:
        source = sources.kernel(name)
        common: dict[str, Any] = {
            "name": name,
            "input_names": list(source.inputs),
            "output_names": list(source.outputs),
            "source": source.body_for(self.name),
            "header": sources.prelude(self.name),
            "ensure_row_contiguous": source.row_contiguous,
        }
        if self.name == "metal":
            return mx.fast.metal_kernel(**common, atomic_outputs=source.atomic_outputs)
        return mx.fast.cuda_kernel(**common)

    def __call__(self, launch: Launch) -> list[mx.array]:
        fn = self._kernels.get(launch.kernel)
        if fn is None:
            fn = self._kernels[launch.kernel] = self._build(launch.kernel)
        return fn(
            inputs=list(launch.inputs),
            template=list(launch.template),
            grid=launch.grid,
            threadgroup=launch.threadgroup,
            output_shapes=[tuple(s) for s in launch.output_shapes],
            output_dtypes=list(launch.output_dtypes),
            init_value=launch.init_value,
        )


_EMULATOR_TYPES = {mx.float32: "float", mx.float16: "float16_t", mx.bfloat16: "bfloat16_t"}
_EMULATOR_TYPES |= {mx.int32: "int32_t", mx.uint32: "uint32_t", mx.uint8: "uint8_t"}
_EMULATOR_TYPES |= {mx.bool_: "bool", mx.int64: "int64_t"}


class EmulatorExecutor:
    """Runs launches in the CPU emulator (metal_kernels.emulator): the tests' backend. With
    ``tsan``, each launch runs in a ThreadSanitizer build and its report is kept in
    ``reports``."""

    name = "emulator"

    def __init__(self, teams: int = 2, tsan: bool = False) -> None:
        self.teams = teams
        self.tsan = tsan
        self.reports: list[str] = []

    def __call__(self, launch: Launch) -> list[mx.array]:
        from metal_kernels import emulator

        source = sources.kernel(launch.kernel)
        inputs = [self._to_numpy(a, keep_strides=not source.row_contiguous) for a in launch.inputs]
        outputs = [
            emulator.Output(tuple(shape), _EMULATOR_TYPES[dtype])
            for shape, dtype in zip(launch.output_shapes, launch.output_dtypes, strict=True)
        ]
        template = [
            (name, value if isinstance(value, (bool, int)) else _EMULATOR_TYPES[value])
            for name, value in launch.template
        ]
        args = (source, inputs, outputs, launch.grid, launch.threadgroup, template)
        if self.tsan:
            checked = emulator.run_tsan(*args, launch.init_value, self.teams)
            self.reports.append(checked.report)
            results = checked.outputs
        else:
            results = emulator.run(*args, launch.init_value, self.teams)
        return [
            self._to_mlx(r, dtype) for r, dtype in zip(results, launch.output_dtypes, strict=True)
        ]

    @staticmethod
    def _to_numpy(a: mx.array, keep_strides: bool) -> Any:
        """A numpy view of ``a`` (strides kept when the kernel indexes by strides)."""
        from metal_kernels import emulator

        data = np.asarray(a.view(mx.uint16) if a.dtype == mx.bfloat16 else a)
        if not keep_strides:
            data = np.ascontiguousarray(data)
        return emulator.Typed(data, "bfloat16_t") if a.dtype == mx.bfloat16 else data

    @staticmethod
    def _to_mlx(result: np.ndarray, dtype: mx.Dtype) -> mx.array:
        if dtype == mx.bfloat16:
            return mx.array(result).view(mx.bfloat16)
        return mx.array(result)


_executors: dict[str, Executor] = {}


def live_executor() -> Executor | None:
    """The executor for ``kernel_path()``, or None (then ops run their references)."""
    path = kernel_path()
    if path == "reference":
        return None
    if path not in _executors:
        _executors[path] = EmulatorExecutor() if path == "emulated" else GpuExecutor(path)
    return _executors[path]


def dispatch(
    op: str,
    kernel: Callable[[Executor], T],
    reference: Callable[[], T],
    agree: Callable[[Any, Any], bool] = self_check.exact,
    *,
    takes: bool = True,
) -> T:
    """Every op's ``run``: ``kernel(executor)`` on a live kernel path where the kernel
    ``takes`` these inputs and has not been switched off, checked against ``reference()`` the
    first time ``op`` runs (``self_check``); else the reference. Each call is counted."""
    executor = live_executor()
    usable = executor is not None and takes and not self_check.is_off(op)
    record(op, usable)
    if not usable:
        return reference()
    if self_check.has_passed(op):
        return kernel(executor)
    return self_check.first_call(op, lambda: kernel(executor), reference, agree)
