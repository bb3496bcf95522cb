"""The reply being generated, kept in the history while it streams.

Why: a reply stored only once it ends is lost whole when FlashChat crashes, is killed or
loses power mid-reply, though the question was kept. So the text so far is written every few
seconds, marked ``interrupted`` (its stats' ``reason``) until the reply ends and the whole
reply with its real stats replaces it; a reply cut off shows as interrupted, with Regenerate.
No Qt here: the window feeds it and shows its StorageErrors.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from app.storage import ConversationStore, StorageError

SAVE_EVERY_S = 3.0
INTERRUPTED = "interrupted"


class ReplyKeeper:
    """One reply at a time: ``start``, ``add`` as text streams, then ``finish``."""

    def __init__(
        self,
        store: Callable[[], ConversationStore],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store, self._clock = store, clock
        self.conversation_id: int | None = None
        self.message_id: int | None = None  # the kept partial reply, once written
        self.record: dict = {}  # what the reply was asked of (see messages.reply_record)
        self._text: list[str] = []
        self._reasoning: list[str] = []
        self._saved_at = 0.0
        self._failed = False
        self.saved = False  # the whole reply is in the history (or there was none to keep)

    def start(self, conversation_id: int | None, record: dict) -> None:
        self.conversation_id, self.record, self.message_id = conversation_id, dict(record), None
        self._text, self._reasoning, self._failed, self.saved = [], [], False, False
        self._saved_at = self._clock()

    @property
    def partial_stats(self) -> dict:
        return {"reason": INTERRUPTED, **self.record}

    def add(self, text: str, reasoning: str) -> None:
        """More of the reply; written when the last write is ``SAVE_EVERY_S`` old. After a
        failed write (StorageError, raised once) it stops trying until ``finish``."""
        self._text.append(text)
        self._reasoning.append(reasoning)
        if self._failed or self.conversation_id is None:
            return
        if self._clock() - self._saved_at < SAVE_EVERY_S:
            return
        self._saved_at = self._clock()
        text, thought = "".join(self._text), "".join(self._reasoning)
        if not (text or thought):
            return
        try:
            self._write(text, self.partial_stats, thought or None)
        except StorageError:
            self._failed = True
            raise

    def final_stats(self, stats: dict) -> dict:
        """A finished reply's stats with what it was asked of (and no tau a remote server
        did not report)."""
        stats = {**stats, **self.record}
        if not math.isfinite(stats.get("tau") or 0.0):
            stats["tau"] = None
        return stats

    def finish(self, text: str, reasoning: str, stats: dict) -> int:
        """The whole reply with its ``final_stats`` in place of the partial one; its message
        id (-1 when there is nothing to keep). StorageError when it cannot be written."""
        if self.conversation_id is None or not (text or reasoning or self.message_id):
            self.saved = True
            return -1
        self._write(text, stats, reasoning or None)
        self.saved = True
        return self.message_id if self.message_id is not None else -1

    def abandoned(self) -> tuple[int, dict | None, str]:
        """A reply that ended in an error: (message id, stats, reason) for the chat view — the
        partial one kept and marked interrupted, or nothing (-1) if none was written."""
        if self.message_id is None:
            return -1, None, "cancelled"
        return self.message_id, self.partial_stats, INTERRUPTED

    def _write(self, text: str, stats: dict, reasoning: str | None) -> None:
        store = self._store()
        if self.message_id is None:
            message = store.add_message(self.conversation_id, "assistant", text, stats, reasoning)
            self.message_id = message.id
        else:
            store.update_message(self.message_id, text, stats, reasoning)
