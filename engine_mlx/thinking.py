"""Reasoning ("thinking") in a reply: which tokens are reasoning and which are the answer, and
the thinking budget.

A model thinks when its tokenizer carries thinking markers (mlx-lm's tokenizer wrapper finds
them: ``<think>`` / ``</think>`` for Qwen3) and its chat template uses them. Everything after
a start marker and before the end marker is reasoning, whether the template opened the block
in the prompt (Qwen3.5's generation prompt ends in ``<think>\\n``) or the model opens it
itself (Qwen3); the markers belong to neither part.

The budget is a rule on the distribution, not an edit of the text: once a context holds
``budget`` reasoning tokens after an open start marker, the next token is the end marker with
probability 1. The sampler applies it to every row it scores (plain decoding's one row, every
node of a verification tree), so every mode forces the same token at the same place and stays
exactly as lossless as without it. It counts generated reasoning tokens only, as llama.cpp's
``--reasoning-budget`` does: what a template writes into a block it opens in the prompt (the
newline of Qwen3.5's ``<think>\\n``) is the template's, not the model's reasoning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Part(StrEnum):
    REASONING = "reasoning"
    ANSWER = "answer"
    MARKER = "marker"


@dataclass(frozen=True)
class ThinkingMarkers:
    start: int
    end: int


def thinking_markers(tokenizer: Any) -> ThinkingMarkers | None:
    """The single-token markers of a model that thinks; None for one that does not (no
    markers, or a chat template that never uses them)."""
    if not getattr(tokenizer, "has_thinking", False):
        return None
    starts = tuple(getattr(tokenizer, "think_start_tokens", None) or ())
    ends = tuple(getattr(tokenizer, "think_end_tokens", None) or ())
    if len(starts) != 1 or len(ends) != 1:
        return None  # multi-token markers: not a model this engine splits yet
    template = getattr(tokenizer, "chat_template", None) or ""
    if not isinstance(template, str):
        return None
    start_text = getattr(tokenizer, "think_start", None) or ""
    if "enable_thinking" not in template and (not start_text or start_text not in template):
        return None
    return ThinkingMarkers(int(starts[0]), int(ends[0]))


@dataclass
class ReasoningState:
    """Where a context stands: inside a reasoning block or not, how many reasoning tokens the
    open block holds, and how many blocks have opened. A start marker inside an open block
    is a marker, not a new block: a model that writes one mid-reasoning must not restart
    the budget's count (a tiny half-precision model did, and reasoned past its budget)."""

    markers: ThinkingMarkers
    inside: bool = False
    count: int = 0
    opened: int = 0

    def part_of(self, token: int) -> Part:
        """Advance over one token; the part it belongs to."""
        if token == self.markers.start:
            if not self.inside:
                self.inside, self.count, self.opened = True, 0, self.opened + 1
            return Part.MARKER
        if token == self.markers.end and self.inside:
            self.inside = False
            return Part.MARKER
        if self.inside:
            self.count += 1
            return Part.REASONING
        return Part.ANSWER

    def advance(self, tokens: Sequence[int]) -> list[Part]:
        return [self.part_of(int(t)) for t in tokens]

    def copy(self) -> ReasoningState:
        return ReasoningState(self.markers, self.inside, self.count, self.opened)


class ThinkingBudget:
    """The sampler's forcing rule (``Sampler.forcing``): after ``budget`` generated reasoning
    tokens the end marker. It follows the context through ``remember``; ``forced`` answers
    for a row that continues the context with tokens not remembered yet. ``prompt``: the
    prompt's tokens, so that reasoning the prompt wrote into the block it leaves open is not
    counted (while that block lasts)."""

    def __init__(self, markers: ThinkingMarkers, budget: int, prompt: Sequence[int] = ()) -> None:
        if budget < 0:
            raise ValueError("the thinking budget must be at least 0 tokens")
        self.budget = budget
        self.state = ReasoningState(markers)
        opened = ReasoningState(markers)
        opened.advance(prompt)
        self._prompt_written = opened.count if opened.inside else 0
        self._prompt_opened = opened.opened

    def remember(self, tokens: Sequence[int]) -> None:
        self.state.advance(tokens)

    def forced(self, pending: Sequence[int]) -> int | None:
        state = self.state.copy() if pending else self.state
        if pending:
            state.advance(pending)
        if not state.inside:
            return None
        same_block = state.opened == self._prompt_opened
        generated = state.count - (self._prompt_written if same_block else 0)
        return state.markers.end if generated >= self.budget else None
