"""The remote models added with Connect…, as the settings keep them: a JSON list of endpoint
specs (``engine_mlx.remote.Endpoint``)."""

from __future__ import annotations

import json

from engine_mlx.errors import EngineError
from engine_mlx.remote import Endpoint


def saved_remote_models(saved: str) -> list[str]:
    """The specs in ``saved`` that still parse (damaged entries are dropped)."""
    try:
        specs = json.loads(saved)
    except ValueError:
        return []
    valid = []
    for spec in specs if isinstance(specs, list) else []:
        try:
            Endpoint.from_spec(str(spec))
        except EngineError:
            continue
        valid.append(str(spec))
    return valid
