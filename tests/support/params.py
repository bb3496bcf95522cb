"""Parameter grids that `make test-fast` runs a corner of and `make test` runs whole."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest


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
