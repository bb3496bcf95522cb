"""Writes conversations out: FlashChat JSON (lossless, versioned) and Markdown (readable).

The JSON holds everything the history holds, and nothing of the machine that wrote it (no
database ids, no export time), so exporting, importing and exporting again gives the same
bytes. Times are Unix seconds, as stored.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from app.stats_line import format_stats
from app.storage import ConversationRecord, ConversationStore, MessageRecord, StorageError
from app.transfer.errors import TransferError

FORMAT = "flashchat.conversations"
VERSION = 1
FORMATS = ("json", "md")


def records(store: ConversationStore, ids: Iterable[int] | None = None) -> list[ConversationRecord]:
    """The conversations ``ids`` names (in that order), or all of them, most recent first."""
    chosen = [c.id for c in store.list_conversations()] if ids is None else list(ids)
    try:
        return [store.conversation_record(i) for i in chosen]
    except KeyError as exc:
        raise TransferError(f"There is no conversation {exc.args[0].split()[-1]}.") from None


def _message_json(message: MessageRecord) -> dict:
    return {
        "role": message.role,
        "content": message.content,
        "reasoning": message.reasoning,
        "created_at": message.created_at,
        "stats": message.stats,
    }


def to_json(conversations: Sequence[ConversationRecord]) -> str:
    document = {
        "format": FORMAT,
        "version": VERSION,
        "conversations": [
            {
                "title": c.title,
                "created_at": c.created_at,
                "updated_at": c.updated_at,
                "messages": [_message_json(m) for m in c.messages],
            }
            for c in conversations
        ],
    }
    return json.dumps(document, ensure_ascii=False, indent=1) + "\n"


def _when(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _fence(text: str) -> str:
    """A quote-safe <details> body: Markdown inside HTML needs blank lines around it."""
    return f"\n\n{text.strip()}\n\n"


def to_markdown(conversations: Sequence[ConversationRecord]) -> str:
    parts = []
    for c in conversations:
        lines = [f"# {c.title}", "", f"*{_when(c.created_at)}*", ""]
        for m in c.messages:
            lines += [f"## {m.role.capitalize()}", ""]
            if m.reasoning:
                lines += [
                    f"<details><summary>Reasoning</summary>{_fence(m.reasoning)}</details>",
                    "",
                ]
            lines += [m.content.rstrip(), ""]
            if m.stats:
                line = format_stats(m.stats, str(m.stats.get("reason", "")))
                if line:
                    lines += [f"*{line}*", ""]
        parts.append("\n".join(lines))
    return "\n---\n\n".join(parts)


def export_conversations(
    store: ConversationStore, path: Path, fmt: str, ids: Iterable[int] | None = None
) -> int:
    """Writes the file (beside it first, then renamed, so a failed write leaves no half
    file); returns how many conversations it holds."""
    if fmt not in FORMATS:
        raise TransferError(f"Unknown export format {fmt!r}: use json or md.")
    try:
        chosen = records(store, ids)
    except StorageError as exc:
        raise TransferError(str(exc)) from exc
    text = to_json(chosen) if fmt == "json" else to_markdown(chosen)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.writing")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise TransferError(f"Could not write {path}: {exc.strerror or exc}.") from exc
    return len(chosen)
