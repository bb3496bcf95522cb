"""The user's settings: their fields and defaults, the checks a saved value must pass, and
their rows in the history file (``app.storage``), one JSON value a field."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields
from typing import Any

from app.storage import ConversationStore
from engine_mlx.modes import Mode, parse_mode


@dataclass
class AppSettings:
    """Persisted user settings with their defaults."""

    # Qwen2.5's recommended sampling (its generation_config.json): the demo model's own
    temperature: float = 0.7
    top_p: float = 0.8
    top_k: int = 20
    repetition_penalty: float = 1.05
    max_tokens: int = 1024
    loop_guard: bool = True  # stop a reply that repeats one short cycle (engine's loop guard)
    think: bool = True  # a thinking model reasons first (new chats; each chat keeps its own)
    thinking_budget: int = 0  # reasoning tokens before the answer is forced; 0: no budget
    system_prompt: str = "You are a helpful assistant."
    draft_width: int = 2
    block_size: int = 0  # 0 = the drafter's own
    auto_threshold: int = 0  # 0: the expected-rate policy (measured); N: switch at N tokens
    auto_toggle: bool = True
    forced_mode: str = Mode.AUTO.value  # a Mode id, stored as text
    colour_draft_tokens: bool = False
    serve_enabled: bool = False  # Settings -> "Serve on localhost" (app.local_server)
    serve_port: int = 8080
    remote_models: str = "[]"  # JSON list of ``remote.Endpoint`` specs (Connect…)
    window_geometry: str = ""  # base64 of QMainWindow.saveGeometry, opaque here


# Values that parse and have the right type but would still break generation.
_SETTING_CHECKS: dict[str, Any] = {
    "temperature": lambda v: v >= 0,
    "top_p": lambda v: 0 < v <= 1,
    "top_k": lambda v: v >= 0,
    "repetition_penalty": lambda v: 0 < v <= 10,
    "max_tokens": lambda v: v >= 1,
    "draft_width": lambda v: v >= 1,
    "block_size": lambda v: v >= 0,
    "auto_threshold": lambda v: v >= 0,
    "thinking_budget": lambda v: v >= 0,
    "serve_port": lambda v: 1 <= v <= 65535,
    "forced_mode": lambda v: isinstance(v, str) and parse_mode(v) is not None,
}


def _coerce(value: Any, default: Any) -> Any:
    """``value`` as the default's type, or the default when it is not that type."""
    if isinstance(default, bool):
        return value if isinstance(value, bool) else default
    if isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        return value if ok else default
    if isinstance(default, float):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if ok and math.isfinite(value) else default
    return value if isinstance(value, type(default)) else default


def load_settings(store: ConversationStore) -> AppSettings:
    """Saved settings over the defaults; a missing, unknown or bad row never stops the app."""
    defaults = AppSettings()
    rows = store._setting_rows()
    values: dict[str, Any] = {}
    for field in fields(AppSettings):
        default = getattr(defaults, field.name)
        if field.name not in rows:
            continue
        try:
            value = _coerce(json.loads(rows[field.name]), default)
        except (ValueError, TypeError):
            continue
        check = _SETTING_CHECKS.get(field.name)
        if check is None or check(value):
            values[field.name] = value
    return AppSettings(**values)


def save_settings(store: ConversationStore, settings: AppSettings) -> None:
    """Every field as a JSON value, in one transaction."""
    store._write_setting_rows(
        {field.name: json.dumps(getattr(settings, field.name)) for field in fields(AppSettings)}
    )
