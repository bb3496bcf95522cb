"""Where the history file lives, and moving an unusable one aside with its companions."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.history_file import default_database_path, move_aside


def test_default_database_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLASHCHAT_HOME", str(tmp_path / "home"))
    assert default_database_path() == tmp_path / "home" / "flashchat.sqlite3"


def test_move_aside_keeps_every_file_of_the_history(tmp_path: Path) -> None:

    db = tmp_path / "h.sqlite3"
    for suffix, data in (("", b"main"), ("-wal", b"wal"), ("-shm", b"shm")):
        (tmp_path / f"h.sqlite3{suffix}").write_bytes(data)
    aside = move_aside(db)
    assert not db.exists() and aside.name.startswith("h.sqlite3.unusable-")
    assert aside.read_bytes() == b"main"
    assert aside.with_name(aside.name + "-wal").read_bytes() == b"wal"
    assert aside.with_name(aside.name + "-shm").read_bytes() == b"shm"
    db.write_bytes(b"again")
    assert move_aside(db) != aside  # a second move in the same second gets its own name
