"""The runner side of the external-baseline protocol; stdlib only, shared by ``run_*.py``.

Why a child process: each public implementation lives in its own virtual environment
(clashing MLX pins and command names), so ``engine_mlx.bench.external`` starts
``<env>/bin/python run_<name>.py --target DIR --drafter DIR --block B [--dtype D]`` and
talks JSON lines with it:

- runner -> parent, once: ``{"ready": true, "info": {...}}`` after loading and a short test
  generation, or ``{"error": ..., "stage": "load"|"probe", "unsupported": bool}`` and exit 1;
- parent -> runner: ``{"prompt": [ids], "max_tokens": n}``; runner -> parent:
  ``{"decode_tps", "ttft_s", "tau", "tokens", "output"}``, or ``{"error": ...}``;
- the end of stdin ends the runner.

The timing lives here rather than in each runner so every implementation is measured the
same way as our engine: decode tok/s from the first token to the last, tau = tokens per
step with the prefill's token counting as the first step. Libraries print freely, so the
real stdout is kept for the protocol and everything else printed goes to stderr.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, TextIO

PROBE_PROMPT = list(range(1, 17))
PROBE_TOKENS = 6
_OPENBLAS_NAMES = ("libopenblas.so.0", "libopenblas.so")


class Unsupported(Exception):
    """Raised by a runner when the implementation refuses this target (its own words)."""


class Steps:
    """Timestamps of tokens as an implementation hands them over, one ``add`` per step."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens
        self.start = time.perf_counter()
        self.first: float | None = None
        self.last: float | None = None
        self.count = 0
        self.steps = 0

    def add(self, tokens: int, new_step: bool = True) -> None:
        if tokens <= 0 or self.count >= self.max_tokens:
            return
        now = time.perf_counter()
        if self.first is None:
            self.first = now
        self.last = now
        self.count = min(self.max_tokens, self.count + tokens)
        self.steps += int(new_step)

    def result(self, output: list[int]) -> dict[str, Any]:
        out = [int(t) for t in output[: self.max_tokens]]
        first = self.first if self.first is not None else time.perf_counter()
        span = (self.last or first) - first
        return {
            "decode_tps": (len(out) - 1) / span if len(out) > 1 and span > 0 else 0.0,
            "ttft_s": first - self.start,
            "tau": len(out) / max(1, self.steps),
            "tokens": len(out),
            "output": out,
        }


Generate = Callable[[list[int], int, Steps], list[int]]


@dataclass
class Loaded:
    """What a runner's ``load`` returns: its generation function and notes for the report."""

    generate: Generate
    notes: dict[str, Any] = field(default_factory=dict)


def preload_openblas() -> str:
    """Load Debian's OpenBLAS with RTLD_GLOBAL before MLX is imported, as engine_mlx's
    backend does, so fp32 matmuls use the same BLAS in every implementation compared."""
    if not sys.platform.startswith("linux"):
        return "not needed on this platform"
    if os.environ.get("FLASHCHAT_NO_OPENBLAS", "") not in ("", "0"):
        return "disabled by FLASHCHAT_NO_OPENBLAS"
    if "mlx.core" in sys.modules:
        return "too late: mlx.core already imported"
    found = ctypes.util.find_library("openblas")
    for name in ((found,) if found else ()) + _OPENBLAS_NAMES:
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
        except OSError:
            continue
        return f"loaded ({name})"
    return "not found (apt-get install libopenblas0-pthread)"


def _claim_stdout() -> TextIO:
    """The real stdout for protocol lines only; fd 1 (so any print) goes to stderr."""
    sys.stdout.flush()
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return proto


def _send(proto: TextIO, message: dict[str, Any]) -> None:
    proto.write(json.dumps(message) + "\n")
    proto.flush()


def _describe(exc: BaseException) -> str:
    cause = exc.__cause__ if isinstance(exc, Unsupported) and exc.__cause__ else exc
    text = " ".join(str(cause).split()) or "(no message)"
    return f"{type(cause).__name__}: {text[:600]}"


def measure(generate: Generate, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    steps = Steps(max_tokens)
    return steps.result(generate(prompt, max_tokens, steps))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", required=True, help="target model folder (Hugging Face layout)")
    p.add_argument("--drafter", required=True, help="drafter folder in DFlash v1 layout")
    p.add_argument("--block", type=int, required=True, help="draft block size")
    p.add_argument("--dtype", default="", help="compute dtype (empty: the checkpoint's)")
    return p.parse_args(argv)


def serve(load: Callable[[argparse.Namespace], Loaded], package: str) -> int:
    """Load, test, announce, then answer requests until stdin ends."""
    proto = _claim_stdout()
    args = parse_args()
    blas = preload_openblas()
    try:
        loaded = load(args)
    except Exception as exc:
        _send(proto, {"error": _describe(exc), "stage": "load", "unsupported": _unsup(exc)})
        return 1
    try:
        probe = measure(loaded.generate, PROBE_PROMPT, PROBE_TOKENS)
        if probe["tokens"] != PROBE_TOKENS:
            raise RuntimeError(f"stopped after {probe['tokens']} of {PROBE_TOKENS} tokens")
    except Exception as exc:
        _send(proto, {"error": _describe(exc), "stage": "probe", "unsupported": _unsup(exc)})
        return 1
    mx = sys.modules.get("mlx.core")
    info = {
        "package": f"{package} {metadata.version(package)}",
        "mlx": getattr(mx, "__version__", "?"),
        "device": str(mx.default_device()) if mx else "?",
        "openblas": blas,
        "dtype": args.dtype or "checkpoint",
        **loaded.notes,
    }
    _send(proto, {"ready": True, "info": info})
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            reply = measure(loaded.generate, request["prompt"], int(request["max_tokens"]))
        except Exception as exc:
            reply = {"error": _describe(exc)}
        _send(proto, reply)
    return 0


def _unsup(exc: BaseException) -> bool:
    return isinstance(exc, Unsupported)
