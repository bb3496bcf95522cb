"""Loss curves of training runs as a PNG (for the model card), from the histories the
trainers write beside their checkpoints (``train_state.json`` / ``<head>.json``)."""

from __future__ import annotations

import json
from pathlib import Path


def _smooth(values: list[float], window: int = 25) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_curves(runs: dict[str, Path], out: Path) -> Path:
    """``runs``: label -> history file. One panel for the loss (KL to the target), one for
    the agreement metric each trainer logs (drafter: greedy tau on the training batch; MTP:
    top-1 agreement)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (loss_ax, metric_ax) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, file in runs.items():
        history = json.loads(Path(file).read_text())["history"]
        steps = [h["step"] for h in history]
        loss_ax.plot(steps, _smooth([h["loss"] for h in history]), label=label)
        metric = "tau" if "tau" in history[0] else "top1"
        metric_ax.plot(steps, _smooth([h[metric] for h in history]), label=f"{label} ({metric})")
    loss_ax.set_xlabel("step")
    loss_ax.set_ylabel("KL to the target (nats, smoothed)")
    metric_ax.set_xlabel("step")
    metric_ax.set_ylabel("training-batch agreement")
    for ax in (loss_ax, metric_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)
