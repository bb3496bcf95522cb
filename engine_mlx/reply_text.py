"""A reply's committed tokens as text: the answer (through the stop strings) and, for a model
that thinks, the reasoning beside it, with the speculation figures of each part.

Tokens are split by ``thinking.ReasoningState``; the markers become no text. Each part has its
own detokenizer, so a character split across the boundary cannot leak from one into the
other. Stop strings watch the answer only: reasoning may quote anything.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine_mlx.chat import IncrementalDetokenizer, StopStringFilter
from engine_mlx.stats import StepStats
from engine_mlx.thinking import Part, ReasoningState, ThinkingMarkers


@dataclass
class PartFigures:
    """The steps a part was decoded in (a step belongs to the part most of its tokens do)."""

    tokens: int = 0
    steps: int = 0
    tested: int = 0
    accepted: int = 0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "steps": self.steps,
            "tau": self.tokens / self.steps if self.steps else None,
            "acceptance_rate": self.accepted / self.tested if self.tested else None,
            "seconds": self.seconds,
        }


@dataclass(frozen=True)
class StepText:
    segments: tuple[tuple[str, bool], ...]  # the answer's new text, by whether it was drafted
    reasoning: str  # the reasoning's new text
    part: Part  # what the reply is in after this step: reasoning or answer


class ReplyText:
    def __init__(
        self,
        tokenizer: Any,
        stop_strings: Sequence[str],
        markers: ThinkingMarkers | None,
        prompt: Sequence[int],
    ) -> None:
        self.answer = IncrementalDetokenizer(tokenizer)
        self.thoughts = IncrementalDetokenizer(tokenizer)
        self.stops = StopStringFilter(stop_strings)
        self.state = ReasoningState(markers) if markers is not None else None
        if self.state is not None:
            self.state.advance(prompt)  # a template may open the block (Qwen3.5)
        self.answer_parts: list[str] = []
        self.reasoning_parts: list[str] = []
        self.figures = {Part.REASONING: PartFigures(), Part.ANSWER: PartFigures()}

    @property
    def thinks(self) -> bool:
        return self.state is not None

    @property
    def stopped(self) -> bool:
        return self.stops.stopped

    def add(self, tokens: Sequence[int], from_draft: Sequence[bool], step: StepStats) -> StepText:
        """One step's committed tokens (drafted ones first)."""
        parts = self.state.advance(tokens) if self.state else [Part.ANSWER] * len(tokens)
        self._count(parts, step)
        segments: list[tuple[str, bool]] = []
        reasoning: list[str] = []
        run: list[int] = []
        for i, token in enumerate(tokens):
            run.append(token)
            last = i + 1 == len(tokens)
            if last or (parts[i + 1], from_draft[i + 1]) != (parts[i], from_draft[i]):
                if parts[i] is Part.ANSWER:
                    segments.append((self.stops.feed(self.answer.add(run)), from_draft[i]))
                elif parts[i] is Part.REASONING:
                    reasoning.append(self.thoughts.add(run))
                elif not self.state.inside:  # the end marker: the reasoning is complete
                    reasoning.append(self.thoughts.flush())
                run = []
        segments = [(text, drafted) for text, drafted in segments if text]
        self.answer_parts.extend(text for text, _ in segments)
        self.reasoning_parts.extend(reasoning)
        part = Part.REASONING if self.state is not None and self.state.inside else Part.ANSWER
        return StepText(tuple(segments), "".join(reasoning), part)

    def _count(self, parts: list[Part], step: StepStats) -> None:
        if not self.thinks:
            return
        reasoning = parts.count(Part.REASONING)
        answer = parts.count(Part.ANSWER)
        inside = self.state is not None and self.state.inside
        owner = (
            Part.REASONING
            if reasoning > answer or (reasoning == answer and inside)
            else Part.ANSWER
        )
        figures = self.figures[owner]
        figures.tokens += step.committed
        figures.steps += 1
        figures.tested += step.tested
        figures.accepted += step.accepted
        figures.seconds += step.seconds

    def finish(self, stopped_by_string: bool) -> tuple[str, str]:
        """(answer, reasoning), whole. A stop string's answer ends where it began."""
        if not stopped_by_string:
            self.answer_parts.append(self.stops.feed(self.answer.flush()))
            self.answer_parts.append(self.stops.flush())
        self.reasoning_parts.append(self.thoughts.flush())
        return "".join(self.answer_parts), "".join(self.reasoning_parts)

    def segments_json(self) -> dict[str, Any]:
        """The statistics' ``segments``: empty for a model that does not think."""
        if not self.thinks:
            return {}
        return {part.value: figures.to_json() for part, figures in self.figures.items()}
