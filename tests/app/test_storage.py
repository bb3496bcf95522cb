"""The chat history survives restarts, bad files and hard kills, and search finds what it should."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app import storage
from app.storage import ConversationStore, StorageError
from app.storage_schema import SCHEMA_V1, SCHEMA_VERSION

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["fts5", "like"])
def search_store(
    request: pytest.FixtureRequest, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[ConversationStore]:
    """Both search paths, whatever this sqlite build has."""
    if request.param == "like":
        monkeypatch.setattr(storage, "fts5_available", lambda: False)
    elif not storage.fts5_available():
        pytest.skip("this sqlite build has no FTS5 trigram tokenizer")
    with ConversationStore(db_path) as opened:
        assert opened._fts == (request.param == "fts5")
        yield opened


def titles(conversations: list[storage.Conversation]) -> list[str]:
    return [c.title for c in conversations]


def test_creates_folder_schema_and_pragmas(db_path: Path, store: ConversationStore) -> None:
    assert db_path.is_file()
    conn = store._conn
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


def test_conversations_crud_and_order(store: ConversationStore) -> None:
    first = store.create_conversation("First")
    second = store.create_conversation()
    assert second.title == "New chat"
    assert titles(store.list_conversations()) == ["New chat", "First"]
    store.add_message(first.id, "user", "bump")
    listed = store.list_conversations()
    assert titles(listed) == ["First", "New chat"]
    assert listed[0].updated_at > first.updated_at
    assert listed[0].created_at == first.created_at
    store.rename_conversation(second.id, "Second")
    assert titles(store.list_conversations()) == ["First", "Second"]  # rename keeps its place
    store.delete_conversation(second.id)
    store.delete_conversation(second.id)  # idempotent
    assert titles(store.list_conversations()) == ["First"]
    with pytest.raises(KeyError):
        store.rename_conversation(second.id, "gone")


def test_titles_are_cleaned(store: ConversationStore) -> None:
    assert store.create_conversation("  Hello\n  there\t ").title == "Hello there"
    assert store.create_conversation("   ").title == "New chat"
    long = store.create_conversation("x" * 500)
    assert long.title == "x" * 200
    store.rename_conversation(long.id, "")
    assert store.list_conversations()[0].title == "New chat"


def test_messages_in_order_with_stats(store: ConversationStore) -> None:
    conv = store.create_conversation()
    added = [
        store.add_message(conv.id, "system", "be brief"),
        store.add_message(conv.id, "user", "hi"),
        store.add_message(conv.id, "assistant", "hello", {"tok_s": 42.5, "mode": "dflash2"}),
    ]
    assert store.messages(conv.id) == added
    assert added[2].stats == {"tok_s": 42.5, "mode": "dflash2"}
    assert [m.role for m in added] == ["system", "user", "assistant"]
    assert store.messages(conv.id + 1) == []


def test_add_message_rejects_bad_input(store: ConversationStore) -> None:
    conv = store.create_conversation()
    with pytest.raises(ValueError, match="role"):
        store.add_message(conv.id, "tool", "x")
    with pytest.raises(KeyError):
        store.add_message(conv.id + 99, "user", "x")
    with pytest.raises(TypeError):
        store.add_message(conv.id, "user", "x", stats=[1, 2])  # type: ignore[arg-type]
    assert store.messages(conv.id) == []


def test_delete_messages_from(store: ConversationStore) -> None:
    conv = store.create_conversation()
    other = store.create_conversation()
    ids = [store.add_message(conv.id, "user", f"m{i}").id for i in range(5)]
    kept = store.add_message(other.id, "user", "other chat")
    store.delete_messages_from(conv.id, ids[2])
    assert [m.content for m in store.messages(conv.id)] == ["m0", "m1"]
    assert store.messages(other.id) == [kept]
    with pytest.raises(KeyError):
        store.delete_messages_from(conv.id, kept.id)  # not in this conversation
    assert store.messages(other.id) == [kept]
    # Ids are never reused, so a stale id in the GUI cannot hit a newer message.
    assert store.add_message(conv.id, "user", "again").id > ids[-1]


def test_delete_conversation_cascades(store: ConversationStore) -> None:
    conv = store.create_conversation()
    for i in range(3):
        store.add_message(conv.id, "user", f"needle {i}")
    store.delete_conversation(conv.id)
    assert store._conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    assert store.search("needle") == []


def test_search(search_store: ConversationStore) -> None:
    store = search_store
    title_hit = store.create_conversation("Python Tips")
    content_hit = store.create_conversation("Misc")
    store.add_message(content_hit.id, "user", "I am 100% sure that snake_case wins")
    store.add_message(content_hit.id, "assistant", 'She said "quoted" and it\'s fine')
    plain = store.create_conversation("Other")
    store.add_message(plain.id, "user", "100 percent; snakeXcase; python is not slow")

    assert titles(store.search("python tips")) == ["Python Tips"]
    assert titles(store.search("SNAKE_CASE")) == ["Misc"]
    assert titles(store.search("100%")) == ["Misc"]
    assert titles(store.search("%")) == ["Misc"]
    assert titles(store.search("_")) == ["Misc"]
    assert titles(store.search('"quoted"')) == ["Misc"]
    assert titles(store.search("it's")) == ["Misc"]
    assert titles(store.search("NOT")) == ["Other"]  # FTS operators are taken literally
    assert store.search("tips OR misc") == []
    assert store.search("no such text") == []
    # Most recently updated first, title and content hits alike.
    assert titles(store.search("python")) == ["Other", "Python Tips"]
    store.add_message(title_hit.id, "user", "bump")
    assert titles(store.search("python")) == ["Python Tips", "Other"]
    assert titles(store.search("  ")) == titles(store.list_conversations())


def test_search_follows_edits(search_store: ConversationStore) -> None:
    store = search_store
    conv = store.create_conversation()
    draft = store.add_message(conv.id, "assistant", "draft about walruses")
    store.delete_messages_from(conv.id, draft.id)  # what editing and regenerating do
    final = store.add_message(conv.id, "assistant", "final about penguins")
    assert store.search("walrus") == []
    assert titles(store.search("penguin")) == ["New chat"]
    store.delete_messages_from(conv.id, final.id)
    assert store.search("penguin") == []


def test_fts_index_survives_a_build_without_fts(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not storage.fts5_available():
        pytest.skip("this sqlite build has no FTS5 trigram tokenizer")
    with ConversationStore(db_path) as store:
        conv = store.create_conversation()
        store.add_message(conv.id, "user", "early message")
    with monkeypatch.context() as patch:
        patch.setattr(storage, "fts5_available", lambda: False)
        with ConversationStore(db_path) as store:
            store.add_message(conv.id, "user", "late message")
            assert titles(store.search("late")) == ["New chat"]
    with ConversationStore(db_path) as store:
        assert store._fts
        assert titles(store.search("late message")) == ["New chat"]
        store._conn.execute("INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')")


def test_persists_across_reopen(db_path: Path) -> None:
    with ConversationStore(db_path) as store:
        conv = store.create_conversation("Kept")
        message = store.add_message(conv.id, "user", "still here", {"n": 1})
    with ConversationStore(db_path) as store:
        assert titles(store.list_conversations()) == ["Kept"]
        assert store.messages(conv.id) == [message]
        later = store.create_conversation("Later")
        assert later.updated_at > message.created_at
        assert titles(store.list_conversations()) == ["Later", "Kept"]


def test_garbage_file_raises_and_is_left_untouched(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    garbage = b"These are my notes, not a database.\n" * 200
    db_path.write_bytes(garbage)
    with pytest.raises(StorageError) as caught:
        ConversationStore(db_path)
    assert str(db_path) in str(caught.value)
    assert "move or rename" in str(caught.value)
    assert db_path.read_bytes() == garbage
    assert sorted(p.name for p in db_path.parent.iterdir()) == [db_path.name]


def test_someone_elses_database_is_not_taken_over(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE recipes (name TEXT)")
    conn.commit()
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(StorageError, match="not FlashChat's"):
        ConversationStore(db_path)
    assert db_path.read_bytes() == before


def test_corrupt_database_raises(db_path: Path) -> None:
    with ConversationStore(db_path) as store:
        conv = store.create_conversation()
        for i in range(200):
            store.add_message(conv.id, "user", f"message {i} " * 50)
    data = bytearray(db_path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    for page in range(1, len(data) // page_size):  # scribble on every b-tree page header
        data[page * page_size : page * page_size + 12] = b"\xff" * 12
    db_path.write_bytes(bytes(data))
    with pytest.raises(StorageError, match=r"history\.sqlite3"):
        ConversationStore(db_path)
    assert db_path.read_bytes() == bytes(data)


def test_newer_schema_raises(db_path: Path) -> None:
    with ConversationStore(db_path) as store:
        store.create_conversation("From the future")
    conn = sqlite3.connect(db_path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = db_path.read_bytes()
    with pytest.raises(StorageError, match="newer FlashChat"):
        ConversationStore(db_path)
    assert db_path.read_bytes() == before


def test_connection_belongs_to_its_thread(store: ConversationStore) -> None:
    errors: list[BaseException] = []

    def other_thread() -> None:
        try:
            store.list_conversations()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert len(errors) == 1 and isinstance(errors[0], sqlite3.ProgrammingError)


CRASH_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from app.storage import ConversationStore

    store = ConversationStore(Path(sys.argv[1]))
    conv = store.create_conversation("crash")
    for i in range(3):
        store.add_message(conv.id, "user", f"kept {i}")
    seen = []

    def trace(statement):
        seen.append(statement.split()[0].upper())
        if seen[-1] == "COMMIT" and "INSERT" in seen:  # inserted, not yet committed
            print("killing", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

    store._conn.set_trace_callback(trace)
    # Big enough to spill uncommitted pages into the WAL before the kill.
    store.add_message(conv.id, "user", "lost " + "x" * 3_000_000)
    print("survived", flush=True)
    """
)


def test_hard_kill_mid_write_keeps_committed_messages(db_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", CRASH_SCRIPT, str(db_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr
    assert result.stdout.strip() == "killing"
    assert Path(f"{db_path}-wal").stat().st_size > 0  # the kill left a WAL to recover

    with ConversationStore(db_path) as store:
        (conv,) = store.list_conversations()
        assert [m.content for m in store.messages(conv.id)] == [f"kept {i}" for i in range(3)]
        assert store.search("lost") == []
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        if store._fts:
            store._conn.execute(
                "INSERT INTO messages_fts (messages_fts) VALUES ('integrity-check')"
            )
        store.add_message(conv.id, "user", "after the crash")
        assert len(store.messages(conv.id)) == 4


def test_a_version_1_history_is_upgraded_in_place_and_keeps_its_messages(db_path: Path) -> None:
    """v1 (before replies kept their reasoning): written with v1's own statements."""
    db_path.parent.mkdir(parents=True)
    conn = sqlite3.connect(db_path)
    for statement in SCHEMA_V1:
        conn.execute(statement)
    conn.execute("INSERT INTO conversations VALUES (1, 'old chat', 1.0, 2.0)")
    conn.execute(
        "INSERT INTO messages (conversation_id, role, content, created_at, stats) "
        "VALUES (1, 'assistant', 'hi', 2.0, '{\"tau\": 1.5}')"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    with ConversationStore(db_path) as store:
        (message,) = store.messages(1)
        assert (message.content, message.stats, message.reasoning) == ("hi", {"tau": 1.5}, None)
        store.add_message(1, "assistant", "answer", reasoning="because")
        assert store.messages(1)[-1].reasoning == "because"
        assert store.think(1) is None  # never set: the app's default
        store.set_think(1, False)
        assert store.think(1) is False
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 2
    conn.close()
