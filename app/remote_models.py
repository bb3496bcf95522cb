"""The remote models added with Connect…, as the settings keep them: a JSON list of endpoint
specs (``engine_mlx.remote.Endpoint``)."""

from __future__ import annotations

import json

from PySide6.QtWidgets import QWidget

from app.connect_dialog import ConnectDialog
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


def ask_for_remote_model(parent: QWidget, saved: str) -> tuple[str, list[str]] | None:
    """Connect…: the endpoint the person adds and the saved list with it (last), or None
    when they cancel."""
    dialog = ConnectDialog(parent)
    if not dialog.exec():
        return None
    spec = dialog.endpoint().to_spec()
    return spec, [s for s in saved_remote_models(saved) if s != spec] + [spec]
