"""Training curves for a model card: per-step loss and the trainer's second metric (the
drafter's tau on its training batches, the MTP head's top-1 agreement), raw and smoothed, one
line per run. Reads the history files the trainers write (``{"history": [{"step": ...}]}``).
matplotlib is an optional extra (``flashchat[bench]``)."""

from __future__ import annotations

import json
from pathlib import Path

LABELS = {
    "loss": "KL from the target (training batches)",
    "tau": "tau (training batches)",
    "top1": "top-1 agreement with the target",
}


def read_history(path: Path) -> list[dict]:
    """The per-step records of a trainer's history file."""
    return list(json.loads(Path(path).read_text())["history"])


def moving_average(values: list[float], window: int) -> list[float]:
    """Mean of each value and up to ``window - 1`` before it (curves of noisy batches)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_histories(runs: dict[str, list[dict]], out: Path, window: int = 25) -> Path:
    """Loss and the second metric the runs share, one panel each, smoothed over ``window``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first = next(iter(runs.values()))[0]
    metrics = ["loss", *[k for k in first if k not in ("step", "loss")][:1]]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.6 * len(metrics), 4.0), squeeze=False)
    for ax, key in zip(axes[0], metrics, strict=True):
        for i, (name, history) in enumerate(runs.items()):
            steps = [h["step"] for h in history]
            values = [h[key] for h in history]
            ax.plot(steps, values, color=f"C{i}", alpha=0.2, linewidth=0.8)
            ax.plot(steps, moving_average(values, window), color=f"C{i}", label=name)
        ax.set_xlabel("step")
        ax.set_title(LABELS.get(key, key), fontsize=10)
        ax.grid(alpha=0.3)
        if key == "loss":
            ax.set_yscale("log")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)
