"""The streaming reply's place in the transcript: a frame edited at its tail only.

A reply used to be one table re-inserted whole on every update; Qt re-parses that HTML and
lays the whole table out again, so each update cost more the longer the reply grew (3.7 ms
per update at its start, 60 ms after 2,000 tokens, on a 2-core CPU). Here the reply is a
``QTextFrame`` (shaded and padded like a finished message's table) holding a list of HTML
pieces: the label, the rendered Markdown blocks, the footer. An update keeps the pieces that
did not change where they are and re-inserts the rest, so it costs what changed, not what
was written. Qt lays a frame out incrementally; a table it lays out whole.

Pieces are inserted one after another the way one ``insertHtml`` of their concatenation
would lay them out: a piece's first block would otherwise merge into the block before it.
"""

from __future__ import annotations

from PySide6.QtCore import QRectF
from PySide6.QtGui import (
    QColor,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
    QTextFrameFormat,
)

# An invisible character that starts each inserted piece when the block before it has text,
# so the piece's first block arrives as a block of its own; it is removed at once.
_SENTINEL = "\u2063"


class LiveRegion:
    """A frame at the end of ``document`` whose contents are a list of HTML pieces."""

    def __init__(self, document: QTextDocument, position: int, background: str, gap: int) -> None:
        fmt = QTextFrameFormat()
        fmt.setBackground(QColor(background))
        fmt.setPadding(10)
        fmt.setBorder(0)
        fmt.setMargin(0)
        fmt.setBottomMargin(gap)
        cursor = QTextCursor(document)
        cursor.setPosition(position)
        self.document = document
        self.frame = cursor.insertFrame(fmt)
        self._pieces: list[str] = []
        self._starts: list[int] = []  # where each piece begins (the end of the one before)
        # The formats of the block each piece began in, put back when the piece goes.
        self._before: list[tuple[QTextBlockFormat, QTextCharFormat]] = []
        self.inserted_chars = 0  # HTML characters inserted so far (the cost of the updates)

    def show(self, pieces: list[str]) -> int:
        """Make the frame hold ``pieces``; returns how many were (re)inserted."""
        keep = 0
        limit = min(len(pieces), len(self._pieces))
        while keep < limit and pieces[keep] == self._pieces[keep]:
            keep += 1
        if keep == len(pieces) == len(self._pieces):
            return 0
        layout = self.document.documentLayout()
        top = self._top_of(self._starts[keep] if keep < len(self._starts) else None)
        old_bottom = layout.frameBoundingRect(self.frame).bottom()
        layout.blockSignals(True)  # its repaint would be the whole frame: ours is the change
        try:
            self._replace(pieces, keep)
        finally:
            layout.blockSignals(False)
        bottom = max(old_bottom, layout.frameBoundingRect(self.frame).bottom())
        layout.documentSizeChanged.emit(layout.documentSize())
        width = layout.documentSize().width()
        layout.update[QRectF].emit(QRectF(0, top, width, bottom - top + 1))
        return len(pieces) - keep

    def _top_of(self, position: int | None) -> float:
        """Where the first changed piece begins on the page (its block's top; with no piece to
        replace, the frame's last block)."""
        layout = self.document.documentLayout()
        where = self.frame.lastPosition() if position is None else position
        return layout.blockBoundingRect(self.document.findBlock(where)).top()

    def _replace(self, pieces: list[str], keep: int) -> None:
        cursor = QTextCursor(self.document)
        cursor.beginEditBlock()
        if keep < len(self._pieces):
            cursor.setPosition(self._starts[keep])
            cursor.setPosition(self.frame.lastPosition(), QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            block_format, char_format = self._before[keep]
            cursor.setBlockFormat(block_format)  # as the piece found it
            cursor.setBlockCharFormat(char_format)
            del self._pieces[keep:], self._starts[keep:], self._before[keep:]
        for piece in pieces[keep:]:
            cursor.setPosition(self.frame.lastPosition())
            self._starts.append(cursor.position())
            self._before.append((cursor.blockFormat(), cursor.blockCharFormat()))
            self._pieces.append(piece)
            self._append(cursor, piece)
        cursor.endEditBlock()

    def _append(self, cursor: QTextCursor, html_text: str) -> None:
        """Add ``html_text``'s blocks after the frame's last block, as if imported with it."""
        self.inserted_chars += len(html_text)
        end = cursor.position()
        if cursor.block().length() > 1:
            cursor.insertHtml(f"<p>{_SENTINEL}</p>{html_text}")
            cursor.setPosition(end)
            cursor.setPosition(end + 1, QTextCursor.MoveMode.KeepAnchor)
            cursor.removeSelectedText()
            return
        # An empty block (the frame's first, or the one after a table) would lend its formats
        # to the piece's first block; the importer gives that block its own (a list item
        # gets a block of its own anyway, as in one import).
        scratch = QTextDocument()
        scratch.setHtml(html_text)
        first = scratch.firstBlock()
        cursor.insertHtml(html_text)
        if first.textList() is not None:
            return
        fmt = QTextBlockFormat(first.blockFormat())
        fmt.clearProperty(QTextFormat.Property.ObjectIndex)
        fix = QTextCursor(self.document)
        fix.setPosition(end)
        fix.setBlockFormat(fmt)
        fix.setBlockCharFormat(first.charFormat())

    def remove(self) -> int:
        """Take the frame out of the document; returns where it was."""
        cursor = QTextCursor(self.document)
        start = self.frame.firstPosition() - 1
        cursor.setPosition(start)
        cursor.setPosition(self.frame.lastPosition() + 1, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        return start
