"""The streaming reply's body as HTML pieces, one per Markdown block.

Each update used to convert the whole reply (Markdown to HTML, pygments over every code
block) for Qt to parse whole again. Here a block is rendered once when it is finished and its
HTML kept; only the open block (the last paragraph, list or code fence still growing) is
rendered on each update. The pieces joined are exactly ``render_markdown`` of the same text
once it is finished, so a reply looks the same streaming and finished.
"""

from __future__ import annotations

from app.widgets.markdown_blocks import BlockStream, Part
from app.widgets.markdown_render import Theme, block_mask, render_block


class LiveReply:
    """Feed it the whole text so far (it only grows); it returns the body's pieces."""

    def __init__(self, theme: Theme, tint: bool, code_href: str) -> None:
        self._theme, self._tint, self._code_href = theme, tint, code_href
        self._stream = BlockStream()
        self._finished: list[str] = []  # the finished blocks' HTML (blank prose left out)
        self._finished_code = 0  # code blocks among them (their copy links' numbers)
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
            piece = self._render(part, mask, code, live=part is open_blocks[-1])
            code += part.kind == "code"
            if piece:
                out.append(piece)
        return out

    def _keep(self, piece: str) -> None:
        if piece:
            self._finished.append(piece)

    def _render(self, part: Part, mask: bytes | bytearray | None, code: int, live: bool) -> str:
        self.rendered_chars += len(part.text)
        href = f"{self._code_href}{code}" if part.kind == "code" else ""
        return render_block(part, self._theme, block_mask(part, mask), href, live)
