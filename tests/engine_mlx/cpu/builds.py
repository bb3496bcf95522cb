"""The -march builds of the CPU kernels the tests compile besides the native one, and whether
this CPU can run each (an AVX-512 build dies with an illegal instruction where it cannot)."""

from __future__ import annotations

import platform
from pathlib import Path

import pytest

AVX512 = {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512cd"}
NEEDS = {  # -march -> the CPU flags its code needs
    "x86-64": set(),
    "x86-64-v3": {"avx2", "fma", "bmi2"},
    "skylake-avx512": AVX512,
    "cascadelake": AVX512 | {"avx512_vnni"},
}


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    lines = (line for line in text.splitlines() if line.startswith("flags"))
    return next((set(line.split(":", 1)[1].split()) for line in lines), set())


def skip_unless_runnable(march: str) -> None:
    """Skip the calling test where this CPU cannot run a ``march`` build."""
    if platform.machine() != "x86_64":
        pytest.skip("x86-64 code paths")
    missing = NEEDS[march] - cpu_flags()
    if missing:
        pytest.skip(f"this CPU cannot run a {march} build (lacks {sorted(missing)})")
