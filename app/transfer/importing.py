"""Reads conversations in: FlashChat JSON, OpenAI-style message lists, ChatGPT exports.

Whatever the file holds, the result is either a list of conversations ready to write (in
one transaction, ``ConversationStore.add_conversations``) or a TransferError whose message
says what is wrong and where ("conversation 3, message 2: …"); never another exception.

- **FlashChat JSON** (``export.FORMAT``): read strictly, field by field, so a round trip
  keeps every byte.
- **OpenAI-style messages**: a JSON list of ``{"role", "content"}``, an object with
  ``"messages"``, a list of such objects, or JSON Lines of them (fine-tuning files). Content
  may be text or a list of parts; ``developer`` counts as ``system``. Tool calls, tool
  results and non-text parts have no place in the history: they are left out and counted.
- **ChatGPT's ``conversations.json``**: each conversation's tree (``mapping``) is walked from
  ``current_node`` up to its root, which is the branch ChatGPT shows. Text and multimodal
  text messages are kept; reasoning summaries ("thoughts") go to the reply they precede;
  tool messages, code, execution output and images are left out and counted, and the hidden
  messages ChatGPT never shows are left out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.storage import ROLES, ConversationRecord, MessageRecord, clean_title
from app.transfer.errors import TransferError
from app.transfer.export import FORMAT, VERSION

LATEST_TIME = 2.0**33  # the year 2242: later (or negative) times are damage, not dates


@dataclass(frozen=True)
class Imported:
    conversations: list[ConversationRecord]
    source: str  # "FlashChat JSON", "OpenAI messages" or "ChatGPT export"
    skipped: int = 0  # messages or parts with no place in the history

    def summary(self, name: str) -> str:
        n = len(self.conversations)
        messages = sum(len(c.messages) for c in self.conversations)
        text = (
            f"Imported {n} conversation{'s' * (n != 1)} ({messages} messages) from {name} "
            f"({self.source})."
        )
        if self.skipped:
            text += (
                f" Left out {self.skipped} item{'s' * (self.skipped != 1)} with no place in a "
                "chat history (tool calls and results, images, code runs)."
            )
        return text


def read_import(path: Path, now: float) -> Imported:
    """The file's conversations; TransferError when it cannot be read or is not one of the
    formats. ``now`` dates messages that carry no time of their own."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TransferError(f"Could not read {path}: {exc.strerror or exc}.") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TransferError(
            f"{path.name} is not UTF-8 text (byte {exc.start}); export it as JSON again."
        ) from exc
    return parse_import(text, now)


def parse_import(text: str, now: float) -> Imported:
    try:
        document = json.loads(text)
    except ValueError as exc:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2:
            raise TransferError(f"This file is not JSON ({_json_problem(exc)}).") from None
        document = [
            _json_line(line, n) for n, line in enumerate(text.splitlines(), 1) if line.strip()
        ]
    try:
        return _dispatch(document, now)
    except RecursionError:
        raise TransferError("This file nests its data too deeply to be a conversation.") from None


def _json_problem(exc: ValueError) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"line {exc.lineno}, column {exc.colno}: {exc.msg}"
    return str(exc)


def _json_line(line: str, n: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise TransferError(f"Line {n} is not JSON ({_json_problem(exc)}).") from None


def _dispatch(document: Any, now: float) -> Imported:
    if isinstance(document, dict) and "format" in document:
        return _flashchat(document)
    if isinstance(document, dict) and "messages" in document:
        document = [document]
    if not isinstance(document, list):
        raise TransferError(
            "This file is not a conversation export: expected FlashChat JSON, a list of chat "
            "messages, or ChatGPT's conversations.json."
        )
    if not document:
        raise TransferError("This file holds no conversations.")
    if all(isinstance(item, dict) and "mapping" in item for item in document):
        return _chatgpt(document, now)
    if all(isinstance(item, dict) and "role" in item for item in document):
        return _openai([{"messages": document}], now)
    if all(isinstance(item, dict) and "messages" in item for item in document):
        return _openai(document, now)
    raise TransferError(
        "This file is a JSON list, but not of chat messages ({role, content}), of "
        "conversations ({messages: [...]}) or of ChatGPT conversations ({mapping: ...})."
    )


# --- FlashChat JSON ---------------------------------------------------------------------


def _field(obj: Any, key: str, check: Callable[[Any], bool], want: str, where: str) -> Any:
    if not isinstance(obj, dict) or key not in obj:
        raise TransferError(f"{where}: '{key}' is missing.")
    value = obj[key]
    if not check(value):
        raise TransferError(f"{where}: '{key}' must be {want}.")
    return value


def _is_time(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and 0 <= value < LATEST_TIME
    )


def _is_text(value: Any) -> bool:
    return isinstance(value, str)


_TIME = "a time in Unix seconds"


def _flashchat(document: dict) -> Imported:
    if document.get("format") != FORMAT:
        raise TransferError(
            f"This JSON says its format is {str(document.get('format'))[:60]!r}, not FlashChat's."
        )
    version = document.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TransferError("This FlashChat export has no valid 'version'.")
    if version > VERSION:
        raise TransferError(
            f"This export was written by a newer FlashChat (format version {version}; this one "
            f"reads up to {VERSION}). Update FlashChat to import it."
        )
    items = _field(document, "conversations", lambda v: isinstance(v, list), "a list", "The file")
    return Imported(
        [_flashchat_conversation(c, n) for n, c in enumerate(items, 1)], "FlashChat JSON"
    )


def _flashchat_conversation(obj: Any, n: int) -> ConversationRecord:
    where = f"Conversation {n}"
    if not isinstance(obj, dict):
        raise TransferError(f"{where} is not an object.")
    title = _field(obj, "title", _is_text, "text", where)
    created = _field(obj, "created_at", _is_time, _TIME, where)
    updated = _field(obj, "updated_at", _is_time, _TIME, where)
    items = _field(obj, "messages", lambda v: isinstance(v, list), "a list", where)
    messages = []
    for k, m in enumerate(items, 1):
        at = f"{where}, message {k}"
        if not isinstance(m, dict):
            raise TransferError(f"{at} is not an object.")
        messages.append(
            MessageRecord(
                role=_field(m, "role", lambda v: v in ROLES, " or ".join(ROLES), at),
                content=_field(m, "content", _is_text, "text", at),
                created_at=_field(m, "created_at", _is_time, _TIME, at),
                stats=_field(
                    m, "stats", lambda v: v is None or isinstance(v, dict), "an object or null", at
                ),
                reasoning=_field(
                    m, "reasoning", lambda v: v is None or _is_text(v), "text or null", at
                ),
            )
        )
    return ConversationRecord(title, created, updated, tuple(messages))


# --- OpenAI-style message lists -----------------------------------------------------------

_OPENAI_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
}
_SKIPPED_ROLES = ("tool", "function")


def _openai(items: list, now: float) -> Imported:
    conversations, skipped = [], 0
    for n, item in enumerate(items, 1):
        where = f"Conversation {n}" if len(items) > 1 else "The conversation"
        raw = item.get("messages") if isinstance(item, dict) else None
        if not isinstance(raw, list):
            raise TransferError(f"{where}: 'messages' must be a list.")
        messages = []
        for k, m in enumerate(raw, 1):
            at = f"{where}, message {k}"
            if not isinstance(m, dict):
                raise TransferError(f"{at} is not an object.")
            role = m.get("role")
            if role in _SKIPPED_ROLES:
                skipped += 1
                continue
            if not isinstance(role, str) or role not in _OPENAI_ROLES:
                roles = ", ".join([*_OPENAI_ROLES, *_SKIPPED_ROLES])
                raise TransferError(f"{at}: the role {str(role)[:40]!r} is not one of {roles}.")
            content, left_out = _openai_content(m.get("content"), at)
            skipped += left_out
            if content is None:  # an assistant turn that only called tools
                skipped += 1
                continue
            messages.append(MessageRecord(_OPENAI_ROLES[role], content, now))
        if not messages:
            raise TransferError(f"{where} has no text messages.")
        conversations.append(ConversationRecord(_title(messages), now, now, tuple(messages)))
    return Imported(conversations, "OpenAI messages", skipped)


def _openai_content(content: Any, at: str) -> tuple[str | None, int]:
    """The text, and how many parts were not text; None for no content at all."""
    if content is None:
        return None, 0
    if isinstance(content, str):
        return content, 0
    if not isinstance(content, list):
        raise TransferError(f"{at}: 'content' must be text or a list of parts.")
    texts, other = [], 0
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif (
            isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        ):
            texts.append(part["text"])
        elif isinstance(part, dict) and "type" in part:
            other += 1
        else:
            raise TransferError(f"{at}: a content part must be text or an object with a 'type'.")
    return ("\n\n".join(texts) if texts else None), other


def _title(messages: list[MessageRecord]) -> str:
    first = next((m.content for m in messages if m.role == "user" and m.content.strip()), "")
    return clean_title(first.strip().splitlines()[0][:60] if first.strip() else "")


# --- ChatGPT's conversations.json -------------------------------------------------------------

_TEXT_TYPES = ("text", "multimodal_text")


def _chatgpt(items: list, now: float) -> Imported:
    conversations, skipped = [], 0
    for n, item in enumerate(items, 1):
        where = f"Conversation {n}"
        mapping = item.get("mapping")
        if not isinstance(mapping, dict):
            raise TransferError(f"{where}: 'mapping' must be an object of message nodes.")
        created = item.get("create_time") if _is_time(item.get("create_time")) else now
        updated = item.get("update_time") if _is_time(item.get("update_time")) else created
        messages, left_out = _chatgpt_branch(mapping, item.get("current_node"), created, where)
        skipped += left_out
        title = item.get("title") if isinstance(item.get("title"), str) else ""
        if not title.strip():
            title = _title(messages)
        conversations.append(
            ConversationRecord(clean_title(title), created, max(updated, created), tuple(messages))
        )
    return Imported(conversations, "ChatGPT export", skipped)


def _chatgpt_branch(
    mapping: dict, current: Any, created: float, where: str
) -> tuple[list[MessageRecord], int]:
    """The messages from the root to ``current`` (the branch ChatGPT shows)."""
    if current is None:  # an export without it: the last node that has no children
        leaves = [k for k, v in mapping.items() if isinstance(v, dict) and not v.get("children")]
        current = leaves[-1] if leaves else None
    if not isinstance(current, str) or current not in mapping:
        raise TransferError(f"{where}: 'current_node' does not name one of its messages.")
    path, seen, node_id = [], set(), current
    while node_id is not None:
        if node_id in seen:
            raise TransferError(f"{where}: its message tree loops back on itself.")
        seen.add(node_id)
        node = mapping.get(node_id)
        if not isinstance(node, dict):
            raise TransferError(f"{where}: the message {str(node_id)[:40]!r} is missing.")
        path.append(node)
        node_id = node.get("parent")
        if node_id is not None and not isinstance(node_id, str):
            raise TransferError(f"{where}: a message's 'parent' is not a message id.")
    messages, skipped, reasoning, last_time = [], 0, [], created
    for node in reversed(path):
        message = node.get("message")
        if message is None or _hidden(message):  # the tree's root, ChatGPT's own context
            continue
        kept = _chatgpt_message(message, where)
        if kept is None:
            skipped += 1
            continue
        role, text, thoughts, at, dropped = kept
        skipped += dropped
        last_time = at if at is not None else last_time
        if thoughts is not None:
            reasoning.append(thoughts)
            continue
        if not text.strip() and role != "assistant":
            continue  # ChatGPT's empty system and placeholder turns
        joined = "\n\n".join(reasoning) if role == "assistant" and reasoning else None
        if role == "assistant":
            reasoning = []
        messages.append(MessageRecord(role, text, last_time, None, joined))
    return messages, skipped


def _hidden(message: Any) -> bool:
    metadata = message.get("metadata") if isinstance(message, dict) else None
    return isinstance(metadata, dict) and bool(metadata.get("is_visually_hidden_from_conversation"))


def _chatgpt_message(
    message: Any, where: str
) -> tuple[str, str, str | None, float | None, int] | None:
    """(role, text, reasoning summary or None, time, attachments left out) of a message the
    history can hold; None for one it cannot."""
    if not isinstance(message, dict):
        raise TransferError(f"{where}: a message node's 'message' is not an object.")
    author = message.get("author")
    role = author.get("role") if isinstance(author, dict) else None
    content = message.get("content")
    kind = content.get("content_type") if isinstance(content, dict) else None
    at = message.get("create_time") if _is_time(message.get("create_time")) else None
    if role not in ROLES:
        return None
    if kind == "thoughts" and role == "assistant":
        thoughts = content.get("thoughts")
        if not isinstance(thoughts, list):
            return None
        summaries = [t.get("content") for t in thoughts if isinstance(t, dict)]
        text = "\n\n".join(s for s in summaries if isinstance(s, str) and s.strip())
        return (role, "", text, at, 0) if text else None
    if kind not in _TEXT_TYPES:
        return None
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise TransferError(f"{where}: a text message has no list of 'parts'.")
    texts = [p for p in parts if isinstance(p, str)]
    if not texts and parts:
        return None  # only attachments
    return role, "\n\n".join(texts), None, at, len(parts) - len(texts)
