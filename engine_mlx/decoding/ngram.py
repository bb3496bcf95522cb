"""Prompt-lookup candidates: continuations of earlier occurrences of the context's last words.

Chat replies often repeat what the context already holds (code being edited, names, quoted
text). Matching the last n tokens against the context and proposing what followed costs
nothing to draft; the candidates join the drafter's in the same tree and the same forward.
"""

from __future__ import annotations

from collections import defaultdict


class Continuation(list[int]):
    """What followed an earlier occurrence of the context's last ``match`` tokens: a longer
    match is likelier to go on (a reply copying its prompt matches 6 tokens; code's common
    two-token phrases match 2), so the selector calibrates them apart."""

    def __init__(self, tokens: list[int], match: int) -> None:
        super().__init__(tokens)
        self.match = match


class NGramIndex:
    """Incremental index: n-gram -> end positions in the committed token stream."""

    def __init__(self, min_n: int = 2, max_n: int = 6) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.tokens: list[int] = []
        self._ends: dict[tuple[int, ...], list[int]] = defaultdict(list)

    def extend(self, tokens: list[int]) -> None:
        for token in tokens:
            self.tokens.append(int(token))
            end = len(self.tokens) - 1
            for n in range(self.min_n, self.max_n + 1):
                if end + 1 >= n:
                    self._ends[tuple(self.tokens[end + 1 - n : end + 1])].append(end)

    def continuations(self, max_len: int, max_paths: int) -> list[Continuation]:
        """Up to ``max_paths`` distinct continuations: longest match first, then the longest
        continuation (a recent match inside a repeating pattern has only a short one), then
        the most recent; each knows the length of its match."""
        if max_len <= 0 or max_paths <= 0:
            return []
        last = len(self.tokens) - 1
        found: list[Continuation] = []
        for n in range(self.max_n, self.min_n - 1, -1):
            if last + 1 < n:
                continue
            ends = self._ends.get(tuple(self.tokens[last + 1 - n :]), ())
            conts = [self.tokens[e + 1 : e + 1 + max_len] for e in reversed(ends[-64:])]
            for cont in sorted((c for c in conts if c), key=len, reverse=True):
                if not any(f[: len(cont)] == cont for f in found):
                    found.append(Continuation(cont, n))
                    if len(found) >= max_paths:
                        return found
        return found
