"""The history file's tables, their upgrades from older versions, and the search index's
triggers (``app.storage`` applies them)."""

from __future__ import annotations

SCHEMA_VERSION = 2

# Statements, not a script: executescript() would COMMIT the surrounding transaction.
SCHEMA_V1 = (
    """CREATE TABLE conversations (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        title TEXT NOT NULL,
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL
    )""",
    "CREATE INDEX conversations_updated ON conversations (updated_at)",
    """CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
        role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
        content TEXT NOT NULL,
        created_at REAL NOT NULL,
        stats TEXT
    )""",
    "CREATE INDEX messages_conversation ON messages (conversation_id, id)",
    "CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)
# v2: a reply's reasoning (a thinking model's text before its answer), kept beside the answer,
# and each conversation's Think toggle (NULL: never set, the app's default).
UPGRADES = {
    2: (
        "ALTER TABLE messages ADD COLUMN reasoning TEXT",
        "ALTER TABLE conversations ADD COLUMN think INTEGER",
    )
}

# An external-content index kept in step by triggers (cascade deletes fire them too). It is
# derived data: dropped triggers are recreated and the index rebuilt on the next FTS5 open.
FTS_TRIGGERS = ("messages_fts_ai", "messages_fts_ad", "messages_fts_au")
FTS_SCHEMA = (
    """CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5 (
        content, content='messages', content_rowid='id', tokenize='trigram'
    )""",
    """CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN
        INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
    END""",
    """CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, content)
        VALUES ('delete', old.id, old.content);
    END""",
    """CREATE TRIGGER messages_fts_au AFTER UPDATE OF content ON messages BEGIN
        INSERT INTO messages_fts (messages_fts, rowid, content)
        VALUES ('delete', old.id, old.content);
        INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
    END""",
    "INSERT INTO messages_fts (messages_fts) VALUES ('rebuild')",
)
