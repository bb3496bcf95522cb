"""Each kind of history failure in its own words: only real damage (SQLITE_CORRUPT, NOTADB, a
failed check) offers moving the file aside; a full disk, a failing disk, a file held by another
program or one that may not be written keep the history where it is."""

from __future__ import annotations

import errno
import sqlite3
from pathlib import Path

import pytest

from app.storage import ConversationStore, StorageError
from app.storage_errors import storage_error


def sqlite_failure(code: int, text: str) -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError(text)
    exc.sqlite_errorcode = code  # as sqlite3 sets it on what it raises
    return exc


@pytest.mark.parametrize(
    ("exc", "words", "unusable"),
    [
        (sqlite_failure(11, "database disk image is malformed"), "move or rename", True),
        (sqlite_failure(26, "file is not a database"), "move or rename", True),
        (sqlite_failure(10 | (4 << 8), "disk I/O error"), "check the disk", False),
        (sqlite_failure(5, "database is locked"), "another program", False),
        (sqlite_failure(8, "attempt to write a readonly database"), "permissions", False),
        (OSError(errno.EACCES, "Permission denied"), "permissions", False),
        (OSError(errno.ENOSPC, "No space left on device"), "full", False),
        (sqlite_failure(13, "database or disk is full"), "full", False),
    ],
)
def test_each_failure_is_told_apart(tmp_path: Path, exc, words: str, unusable: bool) -> None:
    error = storage_error(tmp_path / "history.sqlite3", "could not be written", exc)
    assert words in str(error) and str(tmp_path) in str(error)
    assert error.file_unusable is unusable
    if not unusable:
        assert "move or rename" not in str(error) and "damaged" not in str(error)


def test_sqlite_full_with_room_on_the_disk_names_a_limit(db_path: Path) -> None:
    """SQLITE_FULL without root: the file's own page limit (as a quota would do)."""
    with ConversationStore(db_path) as store:
        conv = store.create_conversation("Kept")
        store._conn.execute("PRAGMA max_page_count = 20")
        with pytest.raises(StorageError) as caught:
            store.add_message(conv.id, "user", "x" * 200_000)
    message = str(caught.value)
    assert "full" in message and "limit" in message and "free in" in message
    assert not caught.value.file_unusable and "move or rename" not in message
