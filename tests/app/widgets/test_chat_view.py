"""The chat transcript renders history, streams replies, and its action links work."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QColor, QPalette, QTextCursor
from PySide6.QtWidgets import QApplication

from app.stats_line import format_stats
from app.widgets.chat_view import ChatView
from app.widgets.markdown_render import split_fences

STATS = {
    "decode_tps": 14.23,
    "tau": 3.1,
    "acceptance_rate": 0.78,
    "ttft_s": 0.24,
    "generated_tokens": 128,
    "modes": {"ar": 3, "dflash2": 40},
}
DRAFT_TINT = "background-color:"
PYGMENTS_COLOUR = re.compile(r'<span style="[^"]*color:#[0-9a-f]{6}')


@pytest.fixture
def view(qtbot) -> ChatView:
    widget = ChatView()
    qtbot.addWidget(widget)
    widget.resize(800, 600)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


def anchor_point(view: ChatView, href: str) -> QPoint:
    """Where the link ``href`` is drawn, in viewport coordinates (scrolled into view)."""
    doc = view.browser.document()
    block = doc.begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            fragment = it.fragment()
            if fragment.charFormat().anchorHref() == href:
                cursor = QTextCursor(doc)
                cursor.setPosition(fragment.position() + fragment.length() // 2)
                view.browser.setTextCursor(cursor)
                view.browser.ensureCursorVisible()
                return view.browser.cursorRect(cursor).center()
            it += 1
        block = block.next()
    raise AssertionError(f"no link {href!r} in the transcript")


def click_link(qtbot, view: ChatView, href: str) -> None:
    """Click a link the way a user would, so anchorClicked is exercised for real."""
    point = anchor_point(view, href)
    qtbot.mouseClick(view.browser.viewport(), Qt.MouseButton.LeftButton, pos=point)


def html_of(view: ChatView) -> str:
    return view.browser.toHtml()


def test_history_renders_in_order(view: ChatView) -> None:
    view.add_message("user", "What is 2 + 2?", 1)
    view.add_message("assistant", "It is **4**.", 2, STATS)
    text = view.browser.toPlainText()
    assert text.index("What is 2 + 2?") < text.index("It is 4.")
    assert "You" in text and "Assistant" in text
    assert "font-weight:700" in html_of(view)  # the bold 4
    assert view.message_text(1) == "What is 2 + 2?"
    assert view.message_text(2) == "It is **4**."
    view.clear()
    assert view.browser.toPlainText().strip() == ""
    with pytest.raises(KeyError):
        view.message_text(1)


def test_streaming_accumulates_and_finishes(view: ChatView) -> None:
    view.add_message("user", "Hi", 1)
    view.start_assistant()
    assert "generating…" in view.browser.toPlainText()
    view.append_assistant([("Hello", False), (" there", True)])
    view.append_assistant([(", friend.", False)])
    assert view.streaming_text() == "Hello there, friend."
    assert "Hello there, friend." in view.browser.toPlainText()
    view.finish_assistant(2, STATS, "eos")
    assert view.streaming_text() == ""
    assert view.message_text(2) == "Hello there, friend."
    text = view.browser.toPlainText()
    assert "generating…" not in text
    assert text.count("Hello there, friend.") == 1
    assert "Regenerate" in text
    # A later exchange lands below the finished one.
    view.add_message("user", "Again", 3)
    view.start_assistant()
    view.append_assistant([("Second", False)])
    view.finish_assistant(4, None, "eos")
    text = view.browser.toPlainText()
    assert text.index("friend.") < text.index("Again") < text.index("Second")


def test_markdown_list_and_highlighted_code(view: ChatView) -> None:
    view.add_message(
        "assistant", "**bold**\n\n- one\n- two\n\n```python\ndef f():\n    return 1\n```\n", 1
    )
    out = html_of(view)
    assert "font-weight:700" in out
    assert "<ul" in out and "<li" in out
    assert PYGMENTS_COLOUR.search(out), "code should carry pygments' inline colours"
    assert "def f():" in view.browser.toPlainText()


def test_unclosed_fence_mid_stream_is_a_code_block(view: ChatView) -> None:
    view.start_assistant()
    view.append_assistant([("Here:\n\n```python\nimport os\nprint(os.sep", False)])
    out = html_of(view)
    assert PYGMENTS_COLOUR.search(out)
    assert "python …" in view.browser.toPlainText()  # the code block's label: still open
    assert "```" not in view.browser.toPlainText()
    assert "print(os.sep" in view.browser.toPlainText()
    parts = split_fences(view.streaming_text())
    assert [p.kind for p in parts] == ["markdown", "code"] and not parts[-1].closed


def test_code_copy_link_copies_exactly_the_code(qtbot, view: ChatView) -> None:
    code = "def f(x):\n    return x * 2"
    view.add_message("assistant", f"Try:\n\n```python\n{code}\n```\n\nand\n\n```\nls -l\n```", 7)
    with qtbot.waitSignal(view.copied) as blocker:
        click_link(qtbot, view, "flashchat:code/7/0")
    assert blocker.args == [code]
    assert QApplication.clipboard().text() == code
    with qtbot.waitSignal(view.copied):
        click_link(qtbot, view, "flashchat:code/7/1")
    assert QApplication.clipboard().text() == "ls -l"
    with qtbot.waitSignal(view.copied):
        click_link(qtbot, view, "flashchat:copy/7")
    assert QApplication.clipboard().text() == view.message_text(7)


def test_streaming_code_block_can_be_copied(qtbot, view: ChatView) -> None:
    view.start_assistant()
    view.append_assistant([("```sh\necho hi\n", False)])
    with qtbot.waitSignal(view.copied):
        click_link(qtbot, view, "flashchat:code/live/0")
    assert QApplication.clipboard().text() == "echo hi"


def test_regenerate_and_edit_emit_message_ids(qtbot, view: ChatView) -> None:
    view.add_message("user", "First", 10)
    view.add_message("assistant", "Reply one", 11)
    view.add_message("user", "Second", 12)
    view.add_message("assistant", "Reply two", 13)
    with qtbot.waitSignal(view.regenerate_requested) as blocker:
        click_link(qtbot, view, "flashchat:regenerate/11")
    assert blocker.args == [11]
    with qtbot.waitSignal(view.edit_requested) as blocker:
        click_link(qtbot, view, "flashchat:edit/12")
    assert blocker.args == [12]
    assert "flashchat:regenerate/12" not in html_of(view)  # users get Edit, not Regenerate
    assert "flashchat:edit/13" not in html_of(view)


def test_stats_line() -> None:
    assert format_stats(STATS) == (
        "14.2 tok/s · τ 3.10 · 78% accepted · TTFT 240 ms · 128 tokens · DFlash2 40, Plain 3 steps"
    )
    plain = dict(STATS, acceptance_rate=None, tau=None, modes={"ar": 9, "lookup": 2})
    assert format_stats(plain) == (
        "14.2 tok/s · TTFT 240 ms · 128 tokens · Plain 9, Prompt lookup 2 steps"
    )  # auto: which modes ran
    assert format_stats({"modes": {"lookup": 5, "mtp": 1}}) == "Prompt lookup 5, MTP 1 steps"
    assert format_stats({"modes": {"lookup": 5, "mtp": 0}}) == "Prompt lookup"
    assert format_stats({"modes": {"mtp": 5}}, "context_full") == "context full · MTP"
    assert format_stats(None, "eos") == ""


def test_stats_line_is_shown_under_the_reply(view: ChatView) -> None:
    view.start_assistant()
    view.append_assistant([("Done.", False)])
    view.finish_assistant(3, STATS, "eos")
    text = view.browser.toPlainText()
    assert "14.2 tok/s · τ 3.10 · 78% accepted · TTFT 240 ms · 128 tokens · DFlash2 40" in text
    assert text.index("Done.") < text.index("tok/s")


def test_cancelled_reply_says_stopped(view: ChatView) -> None:
    view.start_assistant()
    view.append_assistant([("Partial ans", False)])
    view.finish_assistant(5, {"generated_tokens": 3}, "cancelled")
    assert "stopped · 3 tokens" in view.browser.toPlainText()
    view.start_assistant()
    view.finish_assistant(6, None, "context_full")
    assert "context full" in view.browser.toPlainText()


def tinted_words(view: ChatView) -> set[str]:
    """Words inside draft-tint spans (the tint colour is unique to draft text)."""
    tint = view._theme.draft_bg
    found = re.findall(
        rf'<span style="[^"]*background-color:{tint};[^"]*">([^<]*)</span>', html_of(view)
    )
    return {word for chunk in found for word in chunk.split()}


def test_draft_colouring_tints_only_flagged_text(view: ChatView) -> None:
    view.start_assistant()
    view.append_assistant([("The answer is ", False), ("forty two", True), (" today.", False)])
    view.append_assistant(
        [("\n\n```python\n", False), ("x = 42", True), ("\nprint(x)\n```", False)]
    )
    assert tinted_words(view) == set()
    before = html_of(view)
    view.set_colour_draft(True)
    assert html_of(view) != before
    words = tinted_words(view)
    assert {"forty", "two", "42"} <= words
    assert not words & {"The", "answer", "today.", "print"}
    view.finish_assistant(1, None, "eos")  # a finished reply keeps its tint
    assert {"forty", "two"} <= tinted_words(view)
    view.set_colour_draft(False)
    assert tinted_words(view) == set()


def test_draft_tint_survives_markdown_syntax(view: ChatView) -> None:
    view.set_colour_draft(True)
    view.add_message("user", "q", 1)
    view.start_assistant()
    view.append_assistant(
        [("# Title\n\n- plain item\n- ", False), ("**drafted** item", True), ("\n\nend", False)]
    )
    words = tinted_words(view)
    assert {"drafted", "item"} <= words
    assert not words & {"Title", "plain", "end"}
    assert "<h" in html_of(view) and "<li" in html_of(view)


def test_streaming_200_appends_is_fast_and_follows_the_bottom(view: ChatView) -> None:
    for i in range(6):
        view.add_message("user" if i % 2 == 0 else "assistant", f"Message {i}\n\n" * 5, i)
    view.start_assistant()
    start = time.perf_counter()
    for i in range(200):
        chunk = f"word{i} " if i % 25 else "\n\n```python\nx = 1\n"
        view.append_assistant([(chunk, i % 3 == 0)])
    elapsed = time.perf_counter() - start
    assert elapsed < 2.0, f"200 appends took {elapsed:.2f} s"
    bar = view.browser.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == bar.maximum()
    # Scrolled up by the user: the stream no longer drags the view down.
    bar.setValue(0)
    view.append_assistant([("more ", False)])
    assert bar.value() == 0


def test_message_added_mid_stream_goes_above_the_stream(view: ChatView) -> None:
    view.start_assistant()
    view.append_assistant([("streaming reply", False)])
    view.add_message("user", "late question", 1)
    text = view.browser.toPlainText()
    assert text.index("late question") < text.index("streaming reply")
    view.append_assistant([(" continues", False)])
    view.finish_assistant(2, None, "eos")
    assert view.browser.toPlainText().count("streaming reply continues") == 1
    view.clear()
    assert view.streaming_text() == "" and view.browser.toPlainText().strip() == ""


def test_palette_switch_re_renders_existing_messages(qtbot, view: ChatView) -> None:
    view.add_message("assistant", "Hello", 1)
    view.start_assistant()
    view.append_assistant([("Still going", False)])
    light_bg = view._theme.assistant_bg
    assert f'bgcolor="{light_bg}"' in html_of(view)
    app = QApplication.instance()
    old = app.palette()
    try:
        app.setPalette(dark_palette())
        qtbot.waitUntil(lambda: view._theme.dark)
        out = html_of(view)
        assert f'bgcolor="{light_bg}"' not in out
        assert out.count(f'bgcolor="{view._theme.assistant_bg}"') == 2
        assert "Hello" in view.browser.toPlainText() and view.streaming_text() == "Still going"
    finally:
        app.setPalette(old)


def dark_palette() -> QPalette:
    palette = QPalette()
    role = QPalette.ColorRole
    for r, colour in (
        (role.Window, "#2b2b2b"),
        (role.WindowText, "#e6e6e6"),
        (role.Base, "#1e1e1e"),
        (role.AlternateBase, "#262626"),
        (role.Text, "#e6e6e6"),
        (role.Button, "#333333"),
        (role.ButtonText, "#e6e6e6"),
        (role.Highlight, "#3d7bd9"),
        (role.HighlightedText, "#ffffff"),
    ):
        palette.setColor(r, QColor(colour))
    return palette  # Link left at Qt's default on purpose: the view must cope


REPLY = (
    "## Reading a file in Python\n\n"
    "You have a few options:\n\n"
    "- `open()` with a **context manager** (recommended)\n"
    "- `pathlib.Path.read_text()` for small files\n"
    "- *memory mapping* for very large ones\n\n"
    "```python\nfrom pathlib import Path\n\n"
    "def count_lines(path: str) -> int:\n"
    '    """Count the lines of a text file."""\n'
    '    with open(path, encoding="utf-8") as f:\n'
    "        return sum(1 for _ in f)\n```\n\n"
    "| Method | Best for |\n|---|---|\n| `read_text` | small files |\n| iteration | big files |\n"
)


def realistic_conversation(view: ChatView) -> None:
    view.add_message("user", "How do I count the lines of a file in Python?\nKeep it short.", 1)
    view.start_assistant()
    draft_words = {"context", "manager", "small", "count_lines", "encoding"}
    for token in re.split(r"(\W)", REPLY):
        if token:
            view.append_assistant([(token, token in draft_words)])
    view.finish_assistant(2, STATS, "eos")
    view.add_message("user", "And in one line?", 3)
    view.start_assistant()
    view.append_assistant([("Use `sum(1 for _ in open(p))`", False), (" — but close", True)])


@pytest.mark.parametrize("mode", ["light", "dark"])
def test_screenshot_of_a_realistic_conversation(qtbot, view: ChatView, mode: str) -> None:
    app = QApplication.instance()
    old = app.palette()
    try:
        app.setPalette(dark_palette() if mode == "dark" else app.style().standardPalette())
        view.set_colour_draft(True)
        realistic_conversation(view)
        view.resize(800, 600)
        qtbot.wait(10)
        assert view._theme.dark == (mode == "dark")
        out = Path(os.environ.get("CHAT_VIEW_SHOTS", "/tmp")) / f"chat_view_{mode}.png"
        assert view.grab().save(str(out))
        view.browser.verticalScrollBar().setValue(0)
        assert view.grab().save(str(out.with_name(f"chat_view_{mode}_top.png")))
        if mode == "dark":  # nothing hard-coded white: every colour follows the palette
            assert "#ffffff" not in html_of(view).split("<body", 1)[1]
    finally:
        app.setPalette(old)
