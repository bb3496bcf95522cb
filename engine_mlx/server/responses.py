"""OpenAI-shaped response objects and stream chunks, plus FlashChat's statistics object.

Every final response (and the last chunk of a stream) carries ``usage`` and, under the key
``flashchat``, what the engine measured: speed, time to first token, how many drafted tokens
the target kept (tau, acceptance) and which decoding modes ran; the final object also says
why the reply stopped in the engine's words (``stop_reason``: eos, max_tokens, stop_string,
repetition, context_full), which OpenAI's ``finish_reason`` cannot.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from engine_mlx.stats import GenerationStats

FINISH_REASONS = {
    "eos": "stop",
    "stop_string": "stop",
    "repetition": "stop",  # the loop guard
    "max_tokens": "length",
    "context_full": "length",
}


def flashchat_stats(stats: GenerationStats, mode: str) -> dict[str, Any]:
    return {
        "mode": mode,
        "decode_tps": round(stats.decode_tps, 3),
        "prefill_tps": round(stats.prefill_tps, 3),
        "ttft_s": round(stats.ttft_s, 4),
        "total_s": round(stats.total_s, 4),
        "tau": round(stats.tau, 4),
        "acceptance_rate": (
            None if stats.acceptance_rate is None else round(stats.acceptance_rate, 4)
        ),
        "steps": stats.steps,
        "context_depth": stats.context_depth,
        "max_context": stats.max_context,
        "modes": dict(stats.modes),
        "drafted_tokens": stats.drafted,
        "accepted_tokens": stats.accepted,
        "reused_prompt_tokens": stats.reused_prompt_tokens,
        "segments": stats.segments,  # a thinking model's reasoning and answer, apart
    }


def usage(stats: GenerationStats) -> dict[str, int]:
    return {
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.generated_tokens,
        "total_tokens": stats.prompt_tokens + stats.generated_tokens,
    }


@dataclass
class ResponseBuilder:
    """Builds one request's objects: the same id and creation time on every chunk."""

    model: str
    chat: bool
    # "deepseek": reasoning in ``reasoning_content`` (and ``reasoning``), as llama-server's
    # --reasoning-format deepseek; "none": inside the content, between the model's markers.
    reasoning_format: str = "deepseek"
    markers: tuple[str, str] = ("<think>", "</think>")
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def _id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.id

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self._id, "object": obj, "created": self.created, "model": self.model}

    def reasoning_fields(self, reasoning: str) -> dict[str, str]:
        return {"reasoning_content": reasoning, "reasoning": reasoning}

    def inline(self, text: str, reasoning: str) -> str:
        """``none``: the answer with its reasoning in front, between the markers."""
        if not reasoning:
            return text
        start, end = self.markers
        return f"{start}{reasoning}{end}{text}"

    def chunk(
        self, text: str | None = None, *, role: bool = False, reasoning: str = ""
    ) -> dict[str, Any]:
        """A stream chunk with new text or reasoning (or, first, the assistant role)."""
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
            if text is not None:
                delta["content"] = text
            if reasoning:
                delta |= self.reasoning_fields(reasoning)
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
            return {**self._base("chat.completion.chunk"), "choices": [choice]}
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": None}
        return {**self._base("text_completion"), "choices": [choice]}

    def final_chunk(
        self, reason: str, stats: GenerationStats, mode: str, with_usage: bool
    ) -> dict[str, Any]:
        """The chunk that ends the stream: the finish reason and FlashChat's statistics."""
        chunk = self.chunk(None if self.chat else "")
        chunk["choices"][0]["finish_reason"] = FINISH_REASONS.get(reason, "stop")
        if self.chat:
            chunk["choices"][0]["delta"] = {}
        chunk["flashchat"] = flashchat_stats(stats, mode) | {"stop_reason": reason}
        if with_usage:
            chunk["usage"] = None  # OpenAI sends usage on its own chunk, after this one
        return chunk

    def usage_chunk(self, stats: GenerationStats, mode: str) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {
            **self._base(obj),
            "choices": [],
            "usage": usage(stats),
            "flashchat": flashchat_stats(stats, mode),
        }

    def complete(
        self, text: str, reason: str, stats: GenerationStats, mode: str, reasoning: str = ""
    ) -> dict:
        """The whole (non-streamed) response."""
        finish = FINISH_REASONS.get(reason, "stop")
        if self.reasoning_format == "none":
            text, reasoning = self.inline(text, reasoning), ""
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if reasoning:
                message |= self.reasoning_fields(reasoning)
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
            if reasoning:
                choice |= self.reasoning_fields(reasoning)
            obj = "text_completion"
        return {
            **self._base(obj),
            "choices": [choice],
            "usage": usage(stats),
            "flashchat": flashchat_stats(stats, mode) | {"stop_reason": reason},
        }
