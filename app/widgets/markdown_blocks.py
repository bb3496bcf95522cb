"""A message's Markdown cut into top-level blocks: fenced code, and prose cut at blank lines.

Blocks are the unit of rendering and of caching: a message renders as its blocks rendered one
by one and joined, so a reply still streaming can render a finished block once and keep it,
re-rendering only the block still growing. Prose is cut only where the cut cannot change the
rendering: before a blank-line-separated line that starts at the margin and is not a list
item (a loose list, an indented continuation, stay one block). A block is *finished* once the
lines that end it are complete (``BlockStream``): text arriving later cannot change it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_FENCE_OPEN = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*([^\s`]*)[^`\n]*$")
# A line that may continue the block above it across a blank line: a list item or indented.
_CONTINUES = re.compile(r"^(?:[ \t]|[-*+](?:[ \t]|$)|\d{1,9}[.)](?:[ \t]|$))")


@dataclass(frozen=True)
class Part:
    """A run of the source: Markdown prose, or one fenced code block."""

    kind: str  # "markdown" or "code"
    text: str  # prose verbatim; code with the fence's indentation removed
    offsets: Sequence[int]  # source index of each character of ``text``
    lang: str = ""
    closed: bool = True
    end: int = 0  # source index just past the part (its closing fence included)


def split_fences(source: str, base: int = 0) -> list[Part]:
    """Cut ``source`` at fenced code blocks; an unclosed fence runs to the end (mid-stream).

    ``base`` is added to every offset (``source`` is then a message's tail from there)."""
    parts: list[Part] = []
    lines = source.splitlines(keepends=True)
    prose_start = 0
    pos = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        opened = _FENCE_OPEN.match(line.rstrip("\r\n"))
        if opened is None:
            pos += len(line)
            i += 1
            continue
        if pos > prose_start:
            parts.append(_prose(source, prose_start, pos, base))
        indent, fence, lang = len(opened.group(1)), opened.group(2), opened.group(3)
        closer = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        pos += len(line)
        i += 1
        chunks: list[str] = []
        offsets: list[int] = []
        body = pos
        closed = False
        while i < len(lines):
            line = lines[i]
            if closer.match(line.rstrip("\r\n")):
                closed = True
                pos += len(line)
                i += 1
                break
            cut = min(len(line) - len(line.lstrip(" \t")), indent)
            chunks.append(line[cut:])
            if indent:  # at the margin the code is the source's run: a range (below)
                offsets.extend(range(base + pos + cut, base + pos + len(line)))
            pos += len(line)
            i += 1
        code = "".join(chunks)
        if code.endswith("\n"):  # the newline before the closing fence is not part of the code
            code = code[:-1]
            if indent:
                offsets.pop()
        where = offsets if indent else range(base + body, base + body + len(code))
        parts.append(Part("code", code, where, lang.lower(), closed, base + pos))
        prose_start = pos
    if len(source) > prose_start:
        parts.append(_prose(source, prose_start, len(source), base))
    return parts


def _prose(source: str, start: int, end: int, base: int) -> Part:
    return Part("markdown", source[start:end], range(base + start, base + end), end=base + end)


def split_blocks(source: str, base: int = 0) -> list[Part]:
    """``split_fences``, with prose further cut into blocks at safe blank lines."""
    out: list[Part] = []
    for part in split_fences(source, base):
        if part.kind == "code":
            out.append(part)
            continue
        start = part.offsets[0] - base
        pos = start
        blank_before = False
        filled = False  # the block so far holds more than blank lines
        for line in part.text.splitlines(keepends=True):
            blank = not line.strip()
            if not blank and blank_before and filled and not _CONTINUES.match(line):
                out.append(_prose(source, start, pos, base))
                start = pos
            filled = filled or not blank
            blank_before = blank
            pos += len(line)
        out.append(_prose(source, start, pos, base))
    return out


def code_blocks(source: str) -> list[str]:
    """The fenced code blocks of a message, exactly as a "Copy" link should copy them."""
    return [part.text for part in split_fences(source) if part.kind == "code"]


class BlockStream:
    """The blocks of a growing text, the finished ones kept: each ``update`` splits only the
    text after the last finished block, so its cost follows the open block, not the text.

    Only complete lines decide that a block is finished: a partial line may still become a
    fence, a list item or a closing fence."""

    def __init__(self) -> None:
        self.finished: list[Part] = []
        self.finished_end = 0  # source index where the open blocks begin
        self.scanned_chars = 0  # characters split so far (the cost of the updates)
        self._fence: _OpenFence | None = None  # the open block, when it is a fence at the margin

    def update(self, text: str) -> tuple[list[Part], list[Part]]:
        """(blocks newly finished, the open blocks after them) for ``text``, which must
        extend the text of earlier calls."""
        if self._fence is not None:
            grown = self._fence.grown(text)
            if grown is not None:
                self.scanned_chars += len(text) - self._fence.seen
                self._fence.seen = len(text)
                return [], [grown]
            self._fence = None
        new, open_blocks = self._split(text)
        if len(open_blocks) == 1:
            self._fence = _OpenFence.of(text, open_blocks[0])
        return new, open_blocks

    def _split(self, text: str) -> tuple[list[Part], list[Part]]:
        complete = text.rfind("\n", self.finished_end) + 1
        new: list[Part] = []
        if complete > self.finished_end:
            self.scanned_chars += complete - self.finished_end
            blocks = split_blocks(text[self.finished_end : complete], self.finished_end)
            last = blocks[-1] if blocks else None
            new = blocks[:-1] + ([last] if last and last.kind == "code" and last.closed else [])
            if new:
                self.finished.extend(new)
                self.finished_end = new[-1].end
        rest = text[self.finished_end :]
        self.scanned_chars += len(rest)
        return new, split_blocks(rest, self.finished_end) if rest else []


@dataclass
class _OpenFence:
    """A fence still open at the end of the text, opened at the margin: its code is the text
    after its opening line, character for character, so a longer text only needs its new
    lines checked for the closing fence (a model writing a whole file in one block would
    otherwise have the whole block split again on every update)."""

    body: int  # where its code begins
    lang: str
    closer: re.Pattern[str]
    seen: int  # the text's length when last checked
    checked: int  # the complete lines before this index hold no closing fence

    @classmethod
    def of(cls, text: str, part: Part) -> _OpenFence | None:
        if part.kind != "code" or part.closed or not part.text:
            return None
        body = part.offsets[0]
        opening = text[text.rfind("\n", 0, body - 1) + 1 : body].rstrip("\r\n")
        fence = _FENCE_OPEN.match(opening)
        if fence is None or fence.group(1):  # an indented fence cuts its lines: the full path
            return None
        mark = fence.group(2)
        closer = re.compile(rf"^[ \t]*{re.escape(mark[0])}{{{len(mark)},}}[ \t]*$")
        return cls(body, fence.group(3).lower(), closer, len(text), text.rfind("\n") + 1)

    def grown(self, text: str) -> Part | None:
        """The open fence's part in ``text``, or None if a line of it may close the fence."""
        complete = text.rfind("\n", self.checked) + 1
        for line in text[self.checked : complete].splitlines():
            if self.closer.match(line.rstrip("\r")):
                return None
        self.checked = max(self.checked, complete)
        tail = text[self.checked :]
        if tail and self.closer.match(tail.rstrip("\r")):
            return None
        code = text[self.body :]
        if code.endswith("\n"):
            code = code[:-1]
        return Part(
            "code", code, range(self.body, self.body + len(code)), self.lang, False, len(text)
        )
