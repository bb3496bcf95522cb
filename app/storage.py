"""Conversations, messages and settings in one SQLite file (stdlib ``sqlite3``, no Qt;
the settings' fields and checks: ``app.settings``).

Threading: a store's connection belongs to the thread that opened it (the GUI thread);
``sqlite3`` enforces this (``check_same_thread``), so a call from another thread raises.

Durability: WAL journal with ``synchronous=NORMAL``. Every commit is safe against the app
crashing or being killed (the WAL is written before COMMIT returns), and the file can never be
corrupted; only a power cut or OS crash may lose the last few commits. FULL would fsync on every
commit, stalling the GUI thread for chat history that is cheap to lose at that margin.

Search: case-insensitive substring match on titles and message content. Message content goes
through an FTS5 trigram index when this sqlite build has one (checked at runtime, queries of 3+
characters); otherwise, and for shorter queries, an escaped LIKE scan (ASCII-only case folding).
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from app.storage_errors import StorageError, damaged, is_storage_failure, storage_error
from app.storage_schema import FTS_SCHEMA, FTS_TRIGGERS, SCHEMA_V1, SCHEMA_VERSION, UPGRADES

__all__ = ["ConversationStore", "StorageError"]  # and the records below

DEFAULT_TITLE = "New chat"
MAX_TITLE_CHARS = 200
ROLES = ("system", "user", "assistant")
MEMORY = ":memory:"
_FTS_MIN_QUERY = 3  # the trigram tokenizer cannot match shorter strings


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    created_at: float
    updated_at: float


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: str
    content: str
    created_at: float
    stats: dict | None
    reasoning: str | None = None


def fts5_available() -> bool:
    """Whether this sqlite build has FTS5 with the trigram tokenizer (SQLite >= 3.34)."""
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("CREATE VIRTUAL TABLE probe USING fts5 (x, tokenize='trigram')")
        return True
    except sqlite3.Error:
        return False
    finally:
        probe.close()


def clean_title(title: str) -> str:
    """One line of at most 200 characters, so the sidebar stays readable; never empty."""
    title = " ".join(title.split())[:MAX_TITLE_CHARS].rstrip()
    return title or DEFAULT_TITLE


@dataclass(frozen=True)
class MessageRecord:
    role: str
    content: str
    created_at: float
    stats: dict | None = None
    reasoning: str | None = None


@dataclass(frozen=True)
class ConversationRecord:
    """A whole conversation with its own times: what an import writes (``add_conversations``)
    and an export reads (``conversation_record``)."""

    title: str
    created_at: float
    updated_at: float
    messages: tuple[MessageRecord, ...]


def _check_message(role: str, content: str, reasoning: str | None) -> None:
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    if not isinstance(content, str):
        raise TypeError(f"content must be str, not {type(content).__name__}")
    if reasoning is not None and not isinstance(reasoning, str):
        raise TypeError(f"reasoning must be str or None, not {type(reasoning).__name__}")


def _decode_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _fts_phrase(text: str) -> str:
    """The whole query as one quoted FTS5 phrase, so operators and quotes are literal."""
    return '"' + text.replace('"', '""') + '"'


def _dump_stats(stats: dict | None) -> str | None:
    if stats is None:
        return None
    if not isinstance(stats, dict):
        raise TypeError(f"stats must be a dict or None, not {type(stats).__name__}")
    return json.dumps(stats)


def _load_stats(text: str | None) -> dict | None:
    """A damaged stats cell costs only the stats, never the message."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class ConversationStore:
    """The chat history file. Each public write is one committed transaction."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._last_time = 0.0
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Autocommit mode: transactions are explicit (see _transaction).
            self._conn = sqlite3.connect(self.path, isolation_level=None, timeout=2.0)
        except (OSError, sqlite3.Error) as exc:
            raise storage_error(self.path, "could not be opened", exc) from exc
        # Text that is not UTF-8 (written by another tool, or a damaged page) is shown with
        # replacement characters rather than making its whole conversation unreadable.
        self._conn.text_factory = _decode_text
        try:
            self._open()
        except BaseException:
            self._conn.close()
            raise

    def _open(self) -> None:
        """Check the file before writing anything to it, then create or upgrade the schema."""
        try:
            version = self._conn.execute("PRAGMA user_version").fetchone()[0]
            check = self._conn.execute("PRAGMA quick_check").fetchone()[0]
            objects = self._conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        except sqlite3.DatabaseError as exc:  # damaged, or a disk that is full or failing
            raise storage_error(self.path, "could not be read", exc) from exc
        if check != "ok":
            raise damaged(self.path, f"is damaged ({check})")
        if version == 0 and objects:
            raise damaged(self.path, "is a SQLite database, but not FlashChat's")
        if version > SCHEMA_VERSION:
            raise StorageError(
                f"The FlashChat database {self.path} was written by a newer FlashChat "
                f"(schema v{version}; this version knows up to v{SCHEMA_VERSION}). "
                "Update FlashChat, or move the file aside to start a fresh history.",
                file_unusable=True,
            )
        with self._guard("could not be prepared"):
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
            with self._transaction() as conn:
                # Read again under the write lock: another FlashChat may have just created it.
                found = conn.execute("PRAGMA user_version").fetchone()[0]
                if found == 0:
                    for statement in SCHEMA_V1:
                        conn.execute(statement)
                    found = 1
                for version in range(found + 1, SCHEMA_VERSION + 1):
                    for statement in UPGRADES[version]:
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self._sync_fts_triggers()
            row = self._conn.execute("SELECT max(updated_at) FROM conversations").fetchone()
            self._last_time = row[0] or 0.0
        self._fts = self._has_fts_triggers()

    def _has_fts_triggers(self) -> bool:
        names = {
            row[0]
            for row in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        }
        return names.issuperset(FTS_TRIGGERS)

    def _sync_fts_triggers(self) -> None:
        """Index messages when FTS5 is here; drop the triggers when it is not, so that writes
        from a build without FTS5 still work (the index is rebuilt when FTS5 is back)."""
        if fts5_available():
            if not self._has_fts_triggers():
                for name in FTS_TRIGGERS:
                    self._conn.execute(f"DROP TRIGGER IF EXISTS {name}")
                for statement in FTS_SCHEMA:
                    self._conn.execute(statement)
        else:
            for name in FTS_TRIGGERS:
                self._conn.execute(f"DROP TRIGGER IF EXISTS {name}")

    @contextmanager
    def _guard(self, problem: str) -> Iterator[None]:
        """Turn disk, lock and corruption errors into StorageError; bugs stay as they are."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if not is_storage_failure(exc):
                raise
            raise storage_error(self.path, problem, exc) from exc

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, rolled back on any error, so a write is all or nothing."""
        with self._guard("could not be written"):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _now(self) -> float:
        """Wall-clock time, nudged to be strictly increasing so "most recent first" never ties
        (coarse clocks) or inverts (clock steps back)."""
        self._last_time = max(time.time(), self._last_time + 1e-6)
        return self._last_time

    def _require_conversation(self, conversation_id: int) -> None:
        row = self._conn.execute(
            "SELECT 1 FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        if row is None:
            raise KeyError(f"no conversation {conversation_id}")

    def _touch(self, conversation_id: int) -> None:
        self._conn.execute(
            "UPDATE conversations SET updated_at = ? WHERE id = ?", (self._now(), conversation_id)
        )

    # Conversations

    def create_conversation(self, title: str = DEFAULT_TITLE) -> Conversation:
        now = self._now()
        title = clean_title(title)
        with self._transaction() as conn:
            cursor = conn.execute(
                "INSERT INTO conversations (title, created_at, updated_at) VALUES (?, ?, ?)",
                (title, now, now),
            )
        return Conversation(cursor.lastrowid, title, now, now)

    def rename_conversation(self, conversation_id: int, title: str) -> None:
        """Renaming does not bump updated_at: the chat keeps its place in the list."""
        with self._transaction() as conn:
            self._require_conversation(conversation_id)
            conn.execute(
                "UPDATE conversations SET title = ? WHERE id = ?",
                (clean_title(title), conversation_id),
            )

    def set_think(self, conversation_id: int, think: bool) -> None:
        """The conversation's Think toggle (a thinking model reasons before answering)."""
        with self._transaction() as conn:
            self._require_conversation(conversation_id)
            conn.execute(
                "UPDATE conversations SET think = ? WHERE id = ?", (int(think), conversation_id)
            )

    def think(self, conversation_id: int) -> bool | None:
        """The conversation's Think toggle; None when never set (or no such conversation)."""
        with self._guard("could not be read"):
            row = self._conn.execute(
                "SELECT think FROM conversations WHERE id = ?", (conversation_id,)
            ).fetchone()
        return None if row is None or row[0] is None else bool(row[0])

    def delete_conversation(self, conversation_id: int) -> None:
        """Deletes its messages too; deleting an unknown id is a no-op."""
        with self._transaction() as conn:
            conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def list_conversations(self) -> list[Conversation]:
        """Most recently updated first."""
        with self._guard("could not be read"):
            rows = self._conn.execute(
                "SELECT id, title, created_at, updated_at FROM conversations "
                "ORDER BY updated_at DESC, id DESC"
            ).fetchall()
        return [Conversation(*row) for row in rows]

    def search(self, query: str) -> list[Conversation]:
        """Conversations whose title or any message contains ``query``, most recent first."""
        query = query.strip()
        if not query:
            return self.list_conversations()
        like = f"%{_escape_like(query)}%"
        if self._fts and len(query) >= _FTS_MIN_QUERY:
            content_match = (
                "SELECT m.conversation_id FROM messages_fts f JOIN messages m ON m.id = f.rowid "
                "WHERE messages_fts MATCH ?"
            )
            content_param = _fts_phrase(query)
        else:
            content_match = "SELECT conversation_id FROM messages WHERE content LIKE ? ESCAPE '\\'"
            content_param = like
        with self._guard("could not be searched"):
            rows = self._conn.execute(
                "SELECT id, title, created_at, updated_at FROM conversations "
                f"WHERE title LIKE ? ESCAPE '\\' OR id IN ({content_match}) "
                "ORDER BY updated_at DESC, id DESC",
                (like, content_param),
            ).fetchall()
        return [Conversation(*row) for row in rows]

    # Messages

    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        stats: dict | None = None,
        reasoning: str | None = None,
    ) -> Message:
        """Committed before returning; bumps the conversation's updated_at."""
        _check_message(role, content, reasoning)
        stats_text = _dump_stats(stats)
        with self._transaction() as conn:
            self._require_conversation(conversation_id)
            now = self._now()
            cursor = conn.execute(
                "INSERT INTO messages (conversation_id, role, content, created_at, stats, "
                "reasoning) VALUES (?, ?, ?, ?, ?, ?)",
                (conversation_id, role, content, now, stats_text, reasoning),
            )
            self._touch(conversation_id)
        # Stats come back through JSON, exactly as messages() will return them later.
        stats = _load_stats(stats_text)
        return Message(cursor.lastrowid, conversation_id, role, content, now, stats, reasoning)

    def update_message(
        self, message_id: int, content: str, stats: dict | None, reasoning: str | None = None
    ) -> None:
        """Rewrites a message's text, stats and reasoning (a reply kept while it streams)."""
        _check_message("assistant", content, reasoning)
        stats_text = _dump_stats(stats)
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT conversation_id FROM messages WHERE id = ?", (message_id,)
            ).fetchone()
            if row is None:
                raise KeyError(f"no message {message_id}")
            conn.execute(
                "UPDATE messages SET content = ?, stats = ?, reasoning = ? WHERE id = ?",
                (content, stats_text, reasoning, message_id),
            )
            self._touch(row[0])

    def messages(self, conversation_id: int) -> list[Message]:
        """In the order they were added."""
        with self._guard("could not be read"):
            rows = self._conn.execute(
                "SELECT id, conversation_id, role, content, created_at, stats, reasoning "
                "FROM messages WHERE conversation_id = ? ORDER BY id",
                (conversation_id,),
            ).fetchall()
        return [Message(*row[:5], _load_stats(row[5]), row[6]) for row in rows]

    def conversation(self, conversation_id: int) -> Conversation:
        """KeyError when there is none."""
        with self._guard("could not be read"):
            row = self._conn.execute(
                "SELECT id, title, created_at, updated_at FROM conversations WHERE id = ?",
                (conversation_id,),
            ).fetchone()
        if row is None:
            raise KeyError(f"no conversation {conversation_id}")
        return Conversation(*row)

    def conversation_record(self, conversation_id: int) -> ConversationRecord:
        """The conversation and its messages, as an export writes them (KeyError if none)."""
        conv = self.conversation(conversation_id)
        messages = tuple(
            MessageRecord(m.role, m.content, m.created_at, m.stats, m.reasoning)
            for m in self.messages(conversation_id)
        )
        return ConversationRecord(conv.title, conv.created_at, conv.updated_at, messages)

    def add_conversations(self, conversations: Sequence[ConversationRecord]) -> list[int]:
        """Writes whole conversations with their own titles and times (an import), all in one
        transaction: either every one is added or none is. Returns the new ids."""
        for conv in conversations:
            for msg in conv.messages:
                _check_message(msg.role, msg.content, msg.reasoning)
        ids = []
        with self._transaction() as conn:
            for conv in conversations:
                cursor = conn.execute(
                    "INSERT INTO conversations (title, created_at, updated_at) VALUES (?, ?, ?)",
                    (clean_title(conv.title), conv.created_at, conv.updated_at),
                )
                ids.append(cursor.lastrowid)
                conn.executemany(
                    "INSERT INTO messages (conversation_id, role, content, created_at, stats, "
                    "reasoning) VALUES (?, ?, ?, ?, ?, ?)",
                    [
                        (
                            cursor.lastrowid,
                            m.role,
                            m.content,
                            m.created_at,
                            _dump_stats(m.stats),
                            m.reasoning,
                        )
                        for m in conv.messages
                    ],
                )
        self._last_time = max([self._last_time, *(c.updated_at for c in conversations)])
        return ids

    def delete_messages_from(self, conversation_id: int, message_id: int) -> None:
        """Deletes that message and every later one in the conversation (regenerate, edit)."""
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?",
                (message_id, conversation_id),
            ).fetchone()
            if row is None:
                raise KeyError(f"no message {message_id} in conversation {conversation_id}")
            conn.execute(
                "DELETE FROM messages WHERE conversation_id = ? AND id >= ?",
                (conversation_id, message_id),
            )
            self._touch(conversation_id)

    # Settings rows (see load_settings / save_settings)

    def _setting_rows(self) -> dict[str, str]:
        with self._guard("could not be read"):
            return dict(self._conn.execute("SELECT key, value FROM settings").fetchall())

    def _write_setting_rows(self, rows: dict[str, str]) -> None:
        """Upserts only these keys, so keys from a newer FlashChat survive a save."""
        with self._transaction() as conn:
            conn.executemany(
                "INSERT INTO settings (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                rows.items(),
            )

    @classmethod
    def temporary(cls) -> ConversationStore:
        """A store in memory: the app keeps working (nothing is saved) while the history file
        cannot be used."""
        return cls(Path(MEMORY))

    @property
    def is_temporary(self) -> bool:
        return str(self.path) == MEMORY

    def close(self) -> None:
        """Closes the connection (idempotent); the WAL is checkpointed into the main file."""
        self._conn.close()

    def __enter__(self) -> ConversationStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
