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
            offsets.extend(range(base + pos + cut, base + pos + len(line)))
            pos += len(line)
            i += 1
        code = "".join(chunks)
        if code.endswith("\n"):  # the newline before the closing fence is not part of the code
            code = code[:-1]
            offsets.pop()
        parts.append(Part("code", code, offsets, lang.lower(), closed, base + pos))
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

    def update(self, text: str) -> tuple[list[Part], list[Part]]:
        """(blocks newly finished, the open blocks after them) for ``text``, which must
        extend the text of earlier calls."""
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
