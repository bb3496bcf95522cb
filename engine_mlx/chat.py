"""Conversations -> token ids, and token ids -> text as it streams.

The chat template is the tokenizer's own (transformers renders it). Streaming text needs care:
a byte-level BPE token can hold half of a UTF-8 character, so text is only released once it
decodes cleanly, and text that could be the start of a stop string is held back until it
either completes the stop string or cannot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine_mlx.errors import ChatTemplateError

Message = dict[str, str]
ROLES = ("system", "user", "assistant")


def check_messages(messages: object) -> list[Message]:
    """``messages`` when it is a list of ``{"role": ROLE, "content": TEXT}`` objects with a
    known role; ChatTemplateError saying which message is wrong otherwise."""
    if not isinstance(messages, list):
        raise ChatTemplateError(
            f"Chat messages must be a JSON list of objects, not {type(messages).__name__}."
        )
    for n, msg in enumerate(messages, 1):
        if not isinstance(msg, dict) or "role" not in msg or "content" not in msg:
            raise ChatTemplateError(
                f"Message {n} needs a 'role' and a 'content'; got {str(msg)[:80]!r}."
            )
        if msg["role"] not in ROLES:
            raise ChatTemplateError(
                f"Message {n} has the role {str(msg['role'])[:40]!r}; use one of "
                f"{', '.join(ROLES)}."
            )
        if not isinstance(msg["content"], str):
            raise ChatTemplateError(f"Message {n}: 'content' must be text.")
    return messages


class ChatFormatter:
    """Applies a model's chat template; raw prompts are encoded as they are."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer

    @property
    def has_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def encode_messages(
        self, messages: Sequence[Message], template_kwargs: dict[str, Any] | None = None
    ) -> list[int]:
        """Render ``messages`` with the generation prompt appended; ``template_kwargs`` go to
        the template (``{"enable_thinking": False}`` turns a Qwen3 model's thinking off)."""
        if not self.has_template:
            raise ChatTemplateError(
                "This model has no chat template (tokenizer_config.json has no "
                "chat_template); use a raw prompt (--raw) or an instruction-tuned model."
            )
        messages = check_messages(list(messages))
        try:
            ids = self.tokenizer.apply_chat_template(
                list(messages), add_generation_prompt=True, tokenize=True, **(template_kwargs or {})
            )
        except Exception as exc:  # jinja errors come in many types
            raise ChatTemplateError(f"The chat template failed to render: {exc}") from exc
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]

    def encode_raw(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text)]


class IncrementalDetokenizer:
    """Releases text only when it decodes without a dangling partial character.

    Decodes a short window (from the last released boundary) on every token, so the cost
    stays constant as the reply grows; spaces that depend on the previous token survive
    because the window starts one released chunk back.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0  # window start
        self._read = 0  # end of text already released

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids)

    def add(self, ids: Sequence[int]) -> str:
        self.ids.extend(int(i) for i in ids)
        prefix_text = self._decode(self.ids[self._prefix : self._read])
        new_text = self._decode(self.ids[self._prefix :])
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            delta = new_text[len(prefix_text) :]
            self._prefix, self._read = self._read, len(self.ids)
            return delta
        return ""

    def flush(self) -> str:
        """Whatever is left at the end (a truly broken character shows as U+FFFD)."""
        prefix_text = self._decode(self.ids[self._prefix : self._read])
        new_text = self._decode(self.ids[self._prefix :])
        self._prefix = self._read = len(self.ids)
        return new_text[len(prefix_text) :]


class StopStringFilter:
    """Holds back text that may be the beginning of a stop string."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.pending = ""
        self.stopped = False

    def feed(self, text: str) -> str:
        """Returns the text that is safe to show; sets ``stopped`` when a stop string ends
        the reply (the stop string itself is never shown)."""
        if self.stopped:
            return ""
        self.pending += text
        if not self.stops:
            out, self.pending = self.pending, ""
            return out
        hits = [(self.pending.find(s), s) for s in self.stops if s in self.pending]
        if hits:
            cut = min(i for i, _ in hits)
            out = self.pending[:cut]
            self.pending = ""
            self.stopped = True
            return out
        hold = 0
        for stop in self.stops:
            for k in range(min(len(stop) - 1, len(self.pending)), 0, -1):
                if self.pending.endswith(stop[:k]):
                    hold = max(hold, k)
                    break
        out = self.pending[: len(self.pending) - hold]
        self.pending = self.pending[len(self.pending) - hold :]
        return out

    def flush(self) -> str:
        out, self.pending = ("" if self.stopped else self.pending), ""
        return out
