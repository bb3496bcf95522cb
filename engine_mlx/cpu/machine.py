"""What this CPU is, for cache keys and for the lines benchmarks print. Stdlib only."""

from __future__ import annotations

import os
import platform
from functools import cache
from pathlib import Path


@cache
def _cpuinfo() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()


def cpu_model() -> str:
    for line in _cpuinfo():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_signature() -> str:
    """The model and feature flags: what compiled code and measured choices depend on."""
    keep = {line for line in _cpuinfo() if line.startswith(("model name", "flags"))}
    return "\n".join(sorted(keep)) or platform.machine() + platform.processor()


def cores() -> int:
    """Cores this process may run on (the affinity mask, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
