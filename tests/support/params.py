"""Parameter grids that `make test-fast` runs a corner of and `make test` runs whole."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from engine_mlx import compute_path


def slow_except(values: Iterable[Any], *fast: Any) -> list[Any]:
    """``values`` for ``pytest.mark.parametrize``, each one not among ``fast`` marked slow
    (a tuple for a parametrize of several names)."""
    return [
        value
        if value in fast
        else pytest.param(
            *(value if isinstance(value, tuple) else (value,)), marks=pytest.mark.slow
        )
        for value in values
    ]


cpu_path_only = pytest.mark.skipif(
    not compute_path.cpu_path(),
    reason="checks the CPU path's own code; FLASHCHAT_PATH=gpu takes MLX's instead",
)
"""For a test of the CPU path's own code (the C products and sampler, numpy layers), which the
GPU path (``FLASHCHAT_PATH=gpu``, as on a Mac) never runs."""
