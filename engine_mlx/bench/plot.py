"""The suite's plot: decode tok/s against context depth, a line per mode, a panel per
prompt category (the layout llama-benchy popularised). matplotlib is an optional extra
(``flashchat[bench]``) since only the benchmark draws."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any


def _label(row: dict[str, Any]) -> str:
    """Our modes by name (dflash2 with its width); baselines by implementation."""
    if row["impl"] != "flashchat":
        return f"{row['impl']} (baseline)"
    return f"{row['mode']} w{row['width']}" if row["mode"] == "dflash2" else row["mode"]


def plot_suite(report: dict[str, Any], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = report["results"]
    categories = list(dict.fromkeys(r["category"] for r in rows))
    fig, axes = plt.subplots(
        1, len(categories), figsize=(5.2 * len(categories), 4.4), sharey=True, squeeze=False
    )
    for ax, category in zip(axes[0], categories, strict=True):
        lines: dict[str, list[tuple[int, float]]] = {}
        for r in rows:
            if r["category"] == category:
                lines.setdefault(_label(r), []).append((r["depth"], r["decode_tps"]))
        for label, points in lines.items():
            points.sort()
            style = "--" if label.endswith("(baseline)") else "-"
            ax.plot([p[0] for p in points], [p[1] for p in points], style, marker="o", label=label)
        ax.set_title(category)
        ax.set_xlabel("context depth (tokens)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("decode tok/s")
    axes[0][-1].legend(fontsize=8, loc="upper right")
    title = f"{report['model']} on {report['machine']} ({report['backend']})"
    # Wrapped: a machine description (CPU, BLAS and its timings) runs past the figure's edges.
    fig.suptitle(textwrap.fill(title, width=int(40 * len(categories))), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)


def calibration_points(report: dict[str, Any]) -> list[tuple[float, int]]:
    """(predicted, realised) tokens of every auto step that verified a draft."""
    return [
        (s["predicted_tokens"], s["tokens"])
        for row in report["results"]
        for run in row.get("steps", [])
        for s in run
        if s["predicted_tokens"] > 0
    ]


def plot_calibration(report: dict[str, Any], out: Path) -> Path:
    """Auto mode's predicted against realised tokens per step, with the mean per predicted
    bin: on the diagonal when the acceptance estimates are honest."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = calibration_points(report)
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
    if points:
        xs, ys = zip(*points, strict=True)
        ax.scatter(xs, ys, s=10, alpha=0.25, label=f"steps ({len(points)})")
        top = max(max(xs), max(ys)) + 0.5
        bins: dict[int, list[tuple[float, int]]] = {}
        for x, y in points:
            bins.setdefault(int(x * 2), []).append((x, y))
        means = sorted(
            (sum(x for x, _ in b) / len(b), sum(y for _, y in b) / len(b)) for b in bins.values()
        )
        ax.plot([m[0] for m in means], [m[1] for m in means], "o-", color="C1", label="mean")
        ax.plot([1, top], [1, top], "--", color="grey", label="predicted = realised")
    ax.set_xlabel("predicted tokens per step")
    ax.set_ylabel("committed tokens per step")
    ax.set_title("auto: predicted vs realised")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
