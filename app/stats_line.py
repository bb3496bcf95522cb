"""A reply's statistics as one line of text: under each reply in the window, and in a
Markdown export (no Qt here, so exports run without a window)."""

from __future__ import annotations

from engine_mlx.modes import mode_label

REASON_NOTES = {
    "cancelled": "stopped",
    "interrupted": "interrupted: FlashChat stopped mid-reply (Regenerate for a whole one)",
    "context_full": "context full",
    "max_tokens": "max tokens",
    "repetition": "stopped: the reply kept repeating itself (loop guard, in Settings)",
}


def format_stats(stats: dict | None, reason: str = "") -> str:
    """One line such as "14.2 tok/s · τ 3.10 · 78% accepted · TTFT 240 ms · 128 tokens · DFlash2".

    Missing or None values are left out; a stop reason worth knowing about comes first.
    """
    bits: list[str] = []
    if reason in REASON_NOTES:
        bits.append(REASON_NOTES[reason])
    stats = stats or {}
    if stats.get("decode_tps") is not None:
        bits.append(f"{stats['decode_tps']:.1f} tok/s")
    if stats.get("tau") is not None:
        bits.append(f"τ {stats['tau']:.2f}")
    if stats.get("acceptance_rate") is not None:
        bits.append(f"{stats['acceptance_rate'] * 100:.0f}% accepted")
    ttft = stats.get("ttft_s")
    if ttft is not None:
        bits.append(f"TTFT {ttft * 1000:.0f} ms" if ttft < 1 else f"TTFT {ttft:.2f} s")
    tokens = stats.get("generated_tokens")
    if tokens is not None:
        bits.append(f"{tokens} token" + ("" if tokens == 1 else "s"))
    modes = {name: n for name, n in (stats.get("modes") or {}).items() if n}
    if len(modes) == 1:
        bits.append(mode_label(next(iter(modes))))
    elif modes:  # auto: every mode that ran, most steps first
        ran = sorted(modes, key=lambda name: -modes[name])
        bits.append(", ".join(f"{mode_label(m)} {modes[m]}" for m in ran) + " steps")
    return " · ".join(bits)
