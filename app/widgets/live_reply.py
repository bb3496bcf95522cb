"""The streaming reply's body as HTML pieces, one per Markdown block.

Each update used to convert the whole reply (Markdown to HTML, pygments over every code
block) for Qt to parse whole again. Here a block is rendered once when it is finished and its
HTML kept; only the open block (the last paragraph, list or code fence still growing) is
rendered on each update. The pieces joined are exactly ``render_markdown`` of the same text
once it is finished, so a reply looks the same streaming and finished.

A code block still open is one block however long it grows (a model writing a whole file), so
it streams as tables of ``CODE_RUN_LINES`` lines that stack as one shaded block: a run of
lines complete is rendered once and kept, and only the last run is redone. Once the fence
closes the block is rendered whole, as it will be finished.
"""

from __future__ import annotations

from app.widgets.markdown_blocks import BlockStream, Part
from app.widgets.markdown_render import Theme, block_mask, code_piece_html, render_block

CODE_RUN_LINES = 40


class LiveReply:
    """Feed it the whole text so far (it only grows); it returns the body's pieces."""

    def __init__(self, theme: Theme, tint: bool, code_href: str) -> None:
        self._theme, self._tint, self._code_href = theme, tint, code_href
        self._stream = BlockStream()
        self._finished: list[str] = []  # the finished blocks' HTML (blank prose left out)
        self._finished_code = 0  # code blocks among them (their copy links' numbers)
        self._runs: list[str] = []  # the open code block's complete runs of lines, as HTML
        self._runs_of = -1  # where that block starts in the source
        self._kept_chars = 0  # the block's characters in those runs
        self.rendered_chars = 0  # source characters rendered so far (the cost of the updates)

    @property
    def scanned_chars(self) -> int:
        """Source characters split into blocks so far."""
        return self._stream.scanned_chars

    def pieces(self, text: str, draft: bytes | bytearray | None) -> list[str]:
        """The body's HTML pieces for ``text`` (``draft``: its per-character draft mask)."""
        mask = draft if self._tint and draft is not None and len(draft) == len(text) else None
        finished, open_blocks = self._stream.update(text)
        for part in finished:
            self._keep(self._render(part, mask, self._finished_code, live=False))
            self._finished_code += part.kind == "code"
        out = list(self._finished)
        code = self._finished_code
        for part in open_blocks:
            live = part is open_blocks[-1]
            if live and part.kind == "code" and not part.closed:
                out += self._open_code(part, mask, code)
            elif piece := self._render(part, mask, code, live=live):
                out.append(piece)
            code += part.kind == "code"
        return out

    def _open_code(self, part: Part, mask: bytes | bytearray | None, code: int) -> list[str]:
        """The open code block as runs of lines: the complete runs kept, the last redone.
        The block's text only grows, so a kept run never changes and is never looked at
        again: an update splits and renders the lines after the kept runs only."""
        start = part.offsets[0] if len(part.offsets) else -1
        if start != self._runs_of:
            self._runs, self._runs_of, self._kept_chars = [], start, 0
        lines = part.text[self._kept_chars :].splitlines(keepends=True)
        if not self._runs and len(lines) <= CODE_RUN_LINES:
            return [self._render(part, mask, code, live=True)]
        href = f"{self._code_href}{code}"
        drafted = block_mask(part, mask)
        while len(lines) > CODE_RUN_LINES:  # a run complete, with more lines after it
            run = "".join(lines[:CODE_RUN_LINES])
            lines = lines[CODE_RUN_LINES:]
            shown = run[:-1]  # the table's end is the line's end
            self._runs.append(self._run_html(part, shown, drafted, href, last=False))
            self._kept_chars += len(run)
        tail = "".join(lines)
        return [*self._runs, self._run_html(part, tail, drafted, href, last=True)]

    def _run_html(
        self, part: Part, text: str, drafted: bytes | None, href: str, *, last: bool
    ) -> str:
        """One run of the open block's lines, starting ``_kept_chars`` into it."""
        self.rendered_chars += len(text)
        run_mask = drafted[self._kept_chars : self._kept_chars + len(text)] if drafted else None
        piece = Part("code", text, range(len(text)), part.lang, closed=False)
        return code_piece_html(
            piece,
            self._theme,
            run_mask if run_mask and any(run_mask) else None,
            href,
            live=last,
            first=not self._runs,
            last=last,
        )

    def _keep(self, piece: str) -> None:
        if piece:
            self._finished.append(piece)

    def _render(self, part: Part, mask: bytes | bytearray | None, code: int, live: bool) -> str:
        self.rendered_chars += len(part.text)
        href = f"{self._code_href}{code}" if part.kind == "code" else ""
        return render_block(part, self._theme, block_mask(part, mask), href, live)
