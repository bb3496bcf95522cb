"""Settings saved in the history file and read back; bad rows fall back to the defaults, and a
newer app's keys survive a save."""

from __future__ import annotations

import json
from pathlib import Path

from app.settings import AppSettings, load_settings, save_settings
from app.storage import ConversationStore


def test_settings_round_trip(store: ConversationStore) -> None:
    assert load_settings(store) == AppSettings()
    custom = AppSettings(
        temperature=0.2,
        top_p=0.5,
        top_k=40,
        max_tokens=64,
        system_prompt="Pirate mode ☠",
        draft_width=3,
        block_size=8,
        auto_threshold=100,
        auto_toggle=False,
        forced_mode="lookup",
        colour_draft_tokens=True,
        window_geometry="AdnQywADAAA=",
    )
    save_settings(store, custom)
    assert load_settings(store) == custom
    save_settings(store, AppSettings())
    assert load_settings(store) == AppSettings()


def test_bad_setting_rows_fall_back(db_path: Path) -> None:
    rows = {
        "temperature": '"hot"',
        "top_p": "{not json",
        "top_k": "true",  # a bool is not an int here
        "max_tokens": "0",  # out of range
        "system_prompt": "42",
        "draft_width": "2.5",
        "block_size": "16",  # fine
        "auto_threshold": "null",
        "auto_toggle": "1",  # not a bool
        "forced_mode": '"warp"',
        "colour_draft_tokens": "true",  # fine
        "window_geometry": "NaN",
        "from_the_future": '"kept"',
    }
    with ConversationStore(db_path) as store:
        store._conn.executemany("INSERT INTO settings VALUES (?, ?)", rows.items())
        loaded = load_settings(store)
        assert loaded == AppSettings(block_size=16, colour_draft_tokens=True)
        store._conn.execute("UPDATE settings SET value = 'NaN' WHERE key = 'temperature'")
        store._conn.execute("UPDATE settings SET value = '1' WHERE key = 'top_p'")
        assert load_settings(store).temperature == AppSettings().temperature
        assert load_settings(store).top_p == 1.0
        save_settings(store, loaded)
        value = store._conn.execute("SELECT value FROM settings WHERE key = 'from_the_future'")
        assert json.loads(value.fetchone()[0]) == "kept"  # a newer app's keys survive a save
