"""The chat transcript: finished messages, the reply streaming in, and their action links.

One ``QTextBrowser`` holds the whole transcript as rich text. Each finished message's HTML is
rendered once and cached; the streaming reply is the document's tail, a ``LiveRegion`` frame
whose finished Markdown blocks stay put while the open block is replaced (``LiveReply``
renders each finished block once), so an update costs what changed, not the reply so far.
When the reply finishes, the frame is swapped for the message's full render, the same HTML
as a reopened chat shows. One document was chosen over a scroll area of per-message browsers
because it gives selection across messages, one scroll bar, and no height-for-width juggling.

The view renders when it is told to; pacing the updates to the eye is ``StreamPacer``'s job.

Action links use the ``flashchat:`` URL scheme (``flashchat:copy/<msg>``,
``flashchat:code/<msg>/<block>``, ``flashchat:regenerate/<msg>``, ``flashchat:edit/<msg>``);
the streaming reply's code blocks use ``live`` in place of a message id.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field

from PySide6.QtCore import QEvent, QUrl, Signal, Slot
from PySide6.QtGui import QDesktopServices, QTextCursor
from PySide6.QtWidgets import QApplication, QTextBrowser, QVBoxLayout, QWidget

from app.stats_line import format_stats
from app.widgets.live_region import LiveRegion
from app.widgets.live_reply import LiveReply
from app.widgets.markdown_render import Theme, code_blocks, render_markdown

SCHEME = "flashchat"


def reasoning_header(stats: dict | None, thinking_since: float | None) -> str:
    """ "Thought for 12 s · 310 tokens · τ 2.40" from a reply's reasoning figures; while the
    model still thinks, "Thinking… 4 s"."""
    if thinking_since is not None:
        return f"Thinking… {time.monotonic() - thinking_since:.0f} s"
    part = ((stats or {}).get("segments") or {}).get("reasoning") or {}
    bits = ["Thought"]
    if part.get("seconds") is not None:
        bits[0] += f" for {part['seconds']:.0f} s"
    if part.get("tokens"):
        bits.append(f"{part['tokens']} tokens")
    if part.get("tau") is not None:
        bits.append(f"τ {part['tau']:.2f}")
    return " · ".join(bits)


ROLE_LABELS = {"user": "You", "assistant": "Assistant"}
LIVE = "live"

# How close to the bottom (in pixels) still counts as "following" the stream.
_FOLLOW_SLACK = 8
_GAP_PX = 10  # between messages
_MESSAGE_GAP = f"margin-top:0px; margin-bottom:{_GAP_PX}px;"


@dataclass
class _Message:
    """A message and what is needed to re-render it (the draft mask survives finishing)."""

    role: str
    text: str = ""
    message_id: int | None = None
    stats: dict | None = None
    reason: str = ""
    reasoning: str = ""  # a thinking model's reasoning, shown in a block above the answer
    expanded: bool | None = None  # the block, opened or closed by hand (None: the default)
    thinking_since: float | None = None  # when the live reasoning began (its running time)
    draft: bytearray = field(default_factory=bytearray)  # 1 per character from draft tokens
    html: str = ""  # cached render of a finished message; "" means stale


class ChatView(QWidget):
    """The transcript of the main window, fed plain values (never engine objects)."""

    regenerate_requested = Signal(int)
    edit_requested = Signal(int)
    copied = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.browser = QTextBrowser(self)
        self.browser.setAccessibleName("Conversation")
        self.browser.setPlaceholderText(
            "Start a conversation: type below and press Ctrl+Enter.\n\n"
            "Replies are generated on this machine. The panel on the right shows the decoding "
            "speed live, how many drafted tokens the model accepts, and how full the context is."
        )
        self.browser.setOpenLinks(False)
        self.browser.setOpenExternalLinks(False)
        self.browser.document().setUndoRedoEnabled(False)  # read-only: no history to keep
        self.browser.document().setDocumentMargin(10)
        self.browser.anchorClicked.connect(self._on_anchor)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.browser)
        self._messages: list[_Message] = []
        self._by_id: dict[int, _Message] = {}
        self._live: _Message | None = None
        self._tail_start = 0  # document position where the streaming message begins
        self._colour_draft = False
        self._theme = Theme.from_palette(self.palette())
        self._region: LiveRegion | None = None  # the streaming reply in the document
        self._reply: LiveReply | None = None  # its body, block by block
        self.redraws = 0  # live re-renders so far (the pacing tests and the benchmark read it)

    # --- public API -------------------------------------------------------------------------

    def clear(self) -> None:
        """Forget every message, including one still streaming."""
        self._messages.clear()
        self._by_id.clear()
        self._live = None
        self._region = self._reply = None
        self.browser.clear()
        self._tail_start = 0

    def add_message(
        self,
        role: str,
        text: str,
        message_id: int,
        stats: dict | None = None,
        reasoning: str | None = None,
    ) -> None:
        """Append a finished message (history, or the user's just-sent prompt); a stored
        reply's stop reason comes with its stats, so a reopened chat shows the same note."""
        reason = str(stats.get("reason", "")) if stats else ""
        message = _Message(role, text, message_id, stats, reason, reasoning or "")
        self._messages.append(message)
        self._by_id[message_id] = message
        if self._live is not None:
            self._rebuild()  # it belongs above the streaming reply
            return
        self._replace_tail(self._finished_html(message), follow=True)
        self._tail_start = self._end()

    def start_assistant(self) -> None:
        """Begin a streaming reply at the bottom (dropping any unfinished one)."""
        self._live = _Message("assistant")
        self._start_region(follow=True)

    def append_assistant(self, segments: list[tuple[str, bool]]) -> None:
        """Add streamed text; ``True`` marks text from speculatively accepted draft tokens."""
        if not segments:
            return
        if self._live is None:
            self.start_assistant()
        live = self._live
        assert live is not None
        for text, from_draft in segments:
            live.text += text
            live.draft.extend(b"\x01" * len(text) if from_draft else bytes(len(text)))
        self._render_live()

    def append_reasoning(self, text: str) -> None:
        """Add streamed reasoning: shown open while the model thinks, closed once it answers."""
        if not text:
            return
        if self._live is None:
            self.start_assistant()
        live = self._live
        assert live is not None
        if live.thinking_since is None:
            live.thinking_since = time.monotonic()
        live.reasoning += text
        self._render_live()

    def finish_assistant(
        self, message_id: int, stats: dict | None, reason: str, reasoning: str | None = None
    ) -> None:
        """Turn the streaming reply into a finished message with its id, stats, stop reason
        and (whole) reasoning."""
        if self._live is None:
            self.start_assistant()
        message = self._live
        assert message is not None
        message.message_id, message.stats, message.reason = message_id, stats, reason
        if reasoning is not None:
            message.reasoning = reasoning
        self._live = None
        self._region = self._reply = None
        self._messages.append(message)
        self._by_id[message_id] = message
        self._replace_tail(self._finished_html(message), follow=self._at_bottom())
        self._tail_start = self._end()

    def set_colour_draft(self, enabled: bool) -> None:
        """Tint (or stop tinting) text that came from draft tokens, re-rendering everything."""
        if enabled == self._colour_draft:
            return
        self._colour_draft = enabled
        self._rebuild()

    def message_text(self, message_id: int, with_reasoning: bool = False) -> str:
        """The raw Markdown of a finished message (its reasoning first, on request, in a
        quoted block); KeyError for an unknown id."""
        message = self._by_id[message_id]
        if not with_reasoning or not message.reasoning:
            return message.text
        quoted = "\n".join("> " + line for line in message.reasoning.strip().splitlines())
        return f"{quoted}\n\n{message.text}"

    def reasoning_open(self, message_id: int) -> bool:
        """Whether a finished message's reasoning block is open (KeyError: no such id)."""
        return bool(self._by_id[message_id].expanded)

    def streaming_text(self) -> str:
        """The text streamed so far, or "" when no reply is streaming."""
        return self._live.text if self._live is not None else ""

    # --- rendering --------------------------------------------------------------------------

    def _finished_html(self, message: _Message) -> str:
        """A finished message's HTML, cached until the theme or draft colouring changes."""
        if not message.html:
            message.html = self._message_html(message)
        return message.html

    def _start_region(self, follow: bool) -> None:
        """Put an empty frame for the streaming reply at the end and render into it."""
        self._replace_tail("", follow)
        theme = self._theme
        self._region = LiveRegion(self.browser.document(), self._end(), theme.assistant_bg, _GAP_PX)
        self._reply = LiveReply(theme, self._colour_draft, f"{SCHEME}:code/{LIVE}/")
        self._render_live()
        if follow:
            bar = self.browser.verticalScrollBar()
            bar.setValue(bar.maximum())

    @Slot()
    def _render_live(self) -> None:
        """Bring the streaming reply's frame up to date: only what changed is re-inserted."""
        if self._live is None or self._region is None:
            return
        bar = self.browser.verticalScrollBar()
        follow, keep = self._at_bottom(), bar.value()
        self._region.show(self._live_pieces())
        self.redraws += 1
        bar.setValue(bar.maximum() if follow else keep)

    def _live_pieces(self) -> list[str]:
        """The streaming reply as the frame's pieces: label, reasoning, body blocks, footer."""
        message, theme = self._live, self._theme
        assert message is not None and self._reply is not None
        pieces = [self._head_html(message.role)]
        if message.reasoning:
            pieces.append(self._reasoning_html(message, LIVE, live=True))
        if message.text:
            pieces += self._reply.pieces(message.text, message.draft)
        else:
            pieces.append(
                f'<p style="margin-top:0px; margin-bottom:0px;"><span style="color:{theme.muted};">'
                "…</span></p>"
            )
        note = "thinking…" if self._thinking(message) else "generating…"
        pieces.append(self._footer(note, []))
        return pieces

    def _head_html(self, role: str) -> str:
        """The small role label at the top of a message."""
        label = html.escape(ROLE_LABELS.get(role, role.title()))
        return (
            f'<p style="margin-top:0px; margin-bottom:4px;"><span style="font-size:small; '
            f'font-weight:700; color:{self._theme.muted};">{label}</span></p>'
        )

    def _message_html(self, message: _Message) -> str:
        """A finished message as a shaded table: role label, body, then its footer line."""
        theme = self._theme
        key = str(message.message_id)
        head = self._head_html(message.role)
        if message.role == "user":
            text = html.escape(message.text).replace("\n", "<br />")
            body = f'<p style="margin-top:0px; margin-bottom:0px; white-space:pre-wrap;">{text}</p>'
            footer = self._footer("", [("Edit", f"edit/{key}")])
            return (
                '<table width="100%" border="0" cellspacing="0" cellpadding="0" '
                f'style="{_MESSAGE_GAP}"><tr><td width="16%"></td>'
                f'<td><table width="100%" border="0" cellspacing="0" cellpadding="10" '
                f'bgcolor="{theme.user_bg}"><tr><td>{head}{body}{footer}</td></tr></table>'
                "</td></tr></table>"
            )
        mask = (
            message.draft
            if self._colour_draft and len(message.draft) == len(message.text)
            else None
        )
        if message.text:
            href = f"{SCHEME}:code/{key}/"
            body = render_markdown(message.text, theme, mask, href).html
        else:
            body = (
                f'<p style="margin-top:0px; margin-bottom:0px;"><span style="color:{theme.muted};">'
                "(no reply)</span></p>"
            )
        if message.reasoning:
            body = self._reasoning_html(message, key, live=False) + body
        if message.role == "assistant":
            links = [("Copy", f"copy/{key}"), ("Regenerate", f"regenerate/{key}")]
            if message.reasoning:
                links.insert(1, ("Copy with reasoning", f"copyall/{key}"))
            footer = self._footer(format_stats(message.stats, message.reason), links)
        else:
            footer = self._footer("", [("Copy", f"copy/{key}")])
        return (
            '<table width="100%" border="0" cellspacing="0" cellpadding="10" '
            f'bgcolor="{theme.assistant_bg}" style="{_MESSAGE_GAP}">'
            f"<tr><td>{head}{body}{footer}</td></tr></table>"
        )

    @staticmethod
    def _thinking(message: _Message) -> bool:
        """Live and still reasoning: no answer text yet."""
        return bool(message.reasoning) and not message.text

    def _reasoning_html(self, message: _Message, key: str, live: bool) -> str:
        """The reasoning block: a header that opens and closes it, and the text when open
        (open by default only while the model is still thinking)."""
        theme = self._theme
        thinking = live and self._thinking(message)
        opened = message.expanded if message.expanded is not None else thinking
        header = reasoning_header(message.stats, message.thinking_since if thinking else None)
        arrow = "▾" if opened else "▸"
        link = (
            f'<a href="{SCHEME}:reasoning/{key}"><span style="color:{theme.muted}; '
            f'text-decoration:none;">{arrow} {html.escape(header)}</span></a>'
        )
        out = f'<p style="margin-top:0px; margin-bottom:4px; font-size:small;">{link}</p>'
        if opened:
            text = html.escape(message.reasoning.strip()).replace("\n", "<br />")
            out += (
                f'<p style="margin-top:0px; margin-bottom:8px; margin-left:12px; '
                f'font-size:small; color:{theme.muted};">{text}</p>'
            )
        return out

    def _footer(self, note: str, links: list[tuple[str, str]]) -> str:
        """A small line: muted note (stats) on the left, action links on the right."""
        theme = self._theme
        anchors = " · ".join(
            f'<a href="{SCHEME}:{target}"><span style="color:{theme.link}; '
            f'text-decoration:none;">{html.escape(text)}</span></a>'
            for text, target in links
        )
        return (
            '<table width="100%" border="0" cellspacing="0" cellpadding="0" '
            'style="margin-top:6px;"><tr>'
            f'<td><span style="font-size:small; color:{theme.muted};">'
            f"{html.escape(note)}</span></td>"
            f'<td align="right"><span style="font-size:small;">{anchors}</span></td>'
            "</tr></table>"
        )

    # --- document plumbing ------------------------------------------------------------------

    def _end(self) -> int:
        """The position of the (always empty) last block of the document."""
        return self.browser.document().characterCount() - 1

    def _at_bottom(self) -> bool:
        """Whether the user is following the stream (has not scrolled up)."""
        bar = self.browser.verticalScrollBar()
        return bar.value() >= bar.maximum() - _FOLLOW_SLACK

    def _replace_tail(self, html_text: str, follow: bool) -> None:
        """Swap everything after ``_tail_start`` (the streaming message) for ``html_text``."""
        bar = self.browser.verticalScrollBar()
        keep = bar.value()
        cursor = QTextCursor(self.browser.document())
        cursor.beginEditBlock()
        cursor.setPosition(min(self._tail_start, self._end()))
        cursor.movePosition(QTextCursor.MoveOperation.End, QTextCursor.MoveMode.KeepAnchor)
        cursor.removeSelectedText()
        if html_text:
            cursor.insertHtml(html_text)
        cursor.endEditBlock()
        bar.setValue(bar.maximum() if follow else keep)

    def _rebuild(self) -> None:
        """Re-render every message (theme or draft colouring changed), keeping the scroll."""
        follow = self._at_bottom()
        keep = self.browser.verticalScrollBar().value()
        for message in self._messages:
            message.html = ""
        self.browser.setHtml("".join(self._finished_html(m) for m in self._messages))
        self._tail_start = self._end()
        if self._live is not None:
            self._start_region(follow)
        bar = self.browser.verticalScrollBar()
        bar.setValue(bar.maximum() if follow else keep)

    def changeEvent(self, event: QEvent) -> None:
        """Follow light/dark palette switches: the HTML carries colours, so re-render."""
        super().changeEvent(event)
        if event.type() == QEvent.Type.PaletteChange:
            theme = Theme.from_palette(self.palette())
            if theme != self._theme:
                self._theme = theme
                self._rebuild()

    # --- links ------------------------------------------------------------------------------

    @Slot(QUrl)
    def _on_anchor(self, url: QUrl) -> None:
        """Dispatch ``flashchat:`` action links; hand ordinary web links to the desktop."""
        if url.scheme() != SCHEME:
            if url.scheme() in ("http", "https", "mailto"):
                QDesktopServices.openUrl(url)
            return
        action, _, rest = url.path().partition("/")
        key, _, index = rest.partition("/")
        if action == "reasoning":
            self.toggle_reasoning(key)
            return
        if action == "code":
            text = self.streaming_text() if key == LIVE else self._text_for(key)
            blocks = code_blocks(text or "")
            if index.isdigit() and int(index) < len(blocks):
                self._copy(blocks[int(index)])
            return
        try:
            message_id = int(key)
        except ValueError:
            return
        if message_id not in self._by_id:
            return
        if action == "copy":
            self._copy(self._by_id[message_id].text)
        elif action == "copyall":
            self._copy(self.message_text(message_id, with_reasoning=True))
        elif action == "regenerate":
            self.regenerate_requested.emit(message_id)
        elif action == "edit":
            self.edit_requested.emit(message_id)

    def toggle_reasoning(self, key: str) -> None:
        """Open or close a reasoning block (``key``: a message id, or the live reply)."""
        message = self._live if key == LIVE else self._text_message(key)
        if message is None:
            return
        live = message is self._live
        shown = (
            message.expanded if message.expanded is not None else (live and self._thinking(message))
        )
        message.expanded = not shown
        message.html = ""
        if live:
            self._render_live()  # the reasoning piece changed: it and the pieces after it
        else:
            self._rebuild()

    def _text_message(self, key: str) -> _Message | None:
        try:
            return self._by_id.get(int(key))
        except ValueError:
            return None

    def _text_for(self, key: str) -> str | None:
        """A finished message's text from a link's id part, or None when it is not one."""
        try:
            message = self._by_id.get(int(key))
        except ValueError:
            return None
        return message.text if message is not None else None

    def _copy(self, text: str) -> None:
        """Put ``text`` on the clipboard and say so (the window shows a status-bar note)."""
        QApplication.clipboard().setText(text)
        self.copied.emit(text)
