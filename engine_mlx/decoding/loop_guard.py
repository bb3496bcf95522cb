"""Stops a reply that has fallen into a loop ("0, 0, 0, …" to the token limit).

A reply is looping when its last ``span`` tokens repeat one cycle of at most ``max_period``
tokens. The guard watches committed tokens one at a time and names the first token at which
that holds, so the reply stops at the same token whatever the step shapes were: every mode
keeps the same text, a prefix of the unguarded reply (nothing before the stop changes).

Why these numbers: real replies repeat short patterns (a Markdown table's ``|---|---|``, a
row of zeros in an array literal) for tens of tokens, rarely for a hundred; a looping model
keeps going for as many tokens as it is allowed.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_PERIOD = 24
SPAN = 120


class LoopGuard:
    def __init__(self, max_period: int = MAX_PERIOD, span: int = SPAN) -> None:
        if not 1 <= max_period < span:
            raise ValueError("the cycle must be shorter than the span it has to fill")
        self.max_period, self.span = max_period, span
        self.tokens: list[int] = []
        # runs[p - 1]: how many tokens in a row, ending at the newest, equal the token p back
        self.runs = [0] * max_period

    def feed(self, tokens: Sequence[int]) -> int | None:
        """Add committed tokens; the index in ``tokens`` of the first one that completes a
        loop, or None."""
        for i, token in enumerate(tokens):
            self.tokens.append(token)
            n = len(self.tokens)
            for p in range(1, self.max_period + 1):
                if n > p and self.tokens[n - 1 - p] == token:
                    self.runs[p - 1] += 1
                    if self.runs[p - 1] >= self.span - p:
                        return i
                else:
                    self.runs[p - 1] = 0
        return None
