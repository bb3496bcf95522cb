"""Sizes and durations as a person reads them in a progress line or an error message."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    """Decimal units, as the hub shows file sizes: 8.05 GB, 512 kB, 17 B."""
    n = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            if unit == "B":
                return f"{int(n)} B"
            return f"{n:.1f} {unit}" if abs(n) < 100 else f"{n:.0f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")


def human_duration(seconds: float | None) -> str:
    """``1 h 05 min``, ``3 min 20 s``, ``12 s``; ``–`` when unknown."""
    if seconds is None or seconds != seconds or seconds == float("inf"):
        return "–"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} min"
    if s >= 60:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s} s"
