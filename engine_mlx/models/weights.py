"""Checking loaded tensors against the module they are meant for, before loading them."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten


def weight_mismatch(module: nn.Module, weights: dict[str, mx.array], prefix: str = "") -> str:
    """A readable description of what is missing or misshapen ('' when all fits)."""
    expected = dict(tree_flatten(module.parameters()))
    missing = sorted(set(expected) - set(weights))
    if missing:
        return "weights missing: " + ", ".join(prefix + k for k in missing[:5])
    for key, value in expected.items():
        if weights[key].shape != value.shape:
            return (
                f"{prefix}{key} has shape {tuple(weights[key].shape)}, "
                f"expected {tuple(value.shape)}"
            )
    return ""
