"""The streaming reply renders block by block: the same HTML as a full render, at a cost per
token that does not grow with the reply (counted in characters and conversions, not time)."""

from __future__ import annotations

import random
import re
from dataclasses import asdict

import pytest
from PySide6.QtGui import QTextCursor, QTextDocument
from PySide6.QtWidgets import QApplication

from app.widgets import live_reply, markdown_render
from app.widgets.chat_view import ChatView
from app.widgets.live_region import LiveRegion
from app.widgets.live_reply import LiveReply
from app.widgets.markdown_blocks import BlockStream, split_blocks
from app.widgets.markdown_render import WORK, Theme, render_markdown

MESSAGES = {
    "fences": (
        "Intro with **bold** and `code`.\n\nSecond paragraph.\n\n```python\ndef f(x):\n"
        '    """Doc."""\n    return x * 2  # twice\n```\n\nBetween.\n\n~~~sh\n$ ls -l\n~~~\n'
        "Right after a fence.\n"
    ),
    "table": (
        "## Compare\n\n| Tool | Speed | Note |\n|---|---|---|\n| csv | slow | stdlib |\n"
        "| pandas | fast | `read_csv` |\n\nAfter the table.\n"
    ),
    "lists": (
        "Steps:\n\n1. First\n2. Second\n\n3. Third, loose\n\n- a\n- b\n\n  continued, indented\n\n"
        "> quoted\n\n* star item\n\nDone.\n"
    ),
    "unclosed": "Start.\n\n```python\nimport os\nprint(os.sep)\nfor i in range(3):\n    print(i",
    "nested": "1. Run:\n\n   ```bash\n   make test\n   ```\n\n2. Then read `the log`.\n",
}


def section(k: int) -> str:
    """A few hundred tokens of a typical long reply: heading, prose, list, code, table."""
    prose = (
        f"Here is some **prose** about step {k}, with `inline code` and a [link](https://x.org). "
    )
    code = "".join(
        f"def f{k}_{i}(x: int) -> int:\n    return x * {i}  # note\n\n" for i in range(4)
    )
    rows = "".join(f"| row{i} | {i * 3} | text {i} |\n" for i in range(4))
    return (
        f"## Section {k}\n\n{prose * 3}\n\n- item one\n- item *two*\n- item three\n\n"
        f"```python\n{code}```\n\n| Name | Value | Note |\n|---|---|---|\n{rows}\n"
    )


def tokens_of(text: str) -> list[str]:
    """Cut text into token-sized pieces (words, spaces and punctuation)."""
    return [t for t in re.split(r"(\s+|\W)", text) if t]


@pytest.fixture
def theme(qapp) -> Theme:
    return Theme.from_palette(qapp.palette())


@pytest.fixture
def frozen_lexing(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The open fence's lexing clock, driven by hand (``now[0]``)."""
    now = [1000.0]
    monkeypatch.setattr(markdown_render, "clock", lambda: now[0])
    markdown_render._streaming_memo.clear()
    return now


@pytest.mark.parametrize("name", sorted(MESSAGES))
@pytest.mark.parametrize("tint", [False, True])
def test_incremental_render_equals_full_render(name, tint, theme, frozen_lexing) -> None:
    text = MESSAGES[name]
    rng = random.Random(name)
    draft = bytearray(rng.random() < 0.4 for _ in text)
    reply = LiveReply(theme, tint, "flashchat:code/live/")
    cut = 0
    while cut < len(text):
        cut = min(len(text), cut + rng.randint(1, 7))
        frozen_lexing[0] += rng.choice([0.0, 0.1, 0.3])  # lexed now and then, as it streams
        pieces = reply.pieces(text[:cut], draft[:cut])
        full = render_markdown(
            text[:cut], theme, draft[:cut] if tint else None, "flashchat:code/live/", True
        )
        assert "".join(pieces) == full.html, f"differs at {cut}: {text[:cut]!r}"
    if name != "unclosed":  # finished: the same as a message rendered from history
        mask = draft if tint else None
        assert "".join(pieces) == render_markdown(text, theme, mask, "flashchat:code/live/").html


def test_blocks_found_as_text_streams_are_the_blocks_of_the_whole() -> None:
    text = "".join(MESSAGES.values()) + section(1)
    rng = random.Random(7)
    stream = BlockStream()
    cut = 0
    while cut < len(text):
        cut = min(len(text), cut + rng.randint(1, 40))
        _, open_blocks = stream.update(text[:cut])
    key = [(p.kind, p.text, list(p.offsets), p.lang, p.closed) for p in split_blocks(text)]
    got = [(p.kind, p.text, list(p.offsets), p.lang, p.closed)
           for p in stream.finished + open_blocks]  # fmt: skip
    assert got == key
    assert len(stream.finished) > 10  # most of it was finished (and kept) on the way


FENCED = [
    "Intro.\n\n```python\n" + "".join(f"x{i} = {i}\n" for i in range(30)) + "```\n\nAfter.\n",
    "~~~~\n" + "a ~~~ b\n~~~\nstill code\n" * 5 + "~~~~~\nprose\n",
    "```js\r\nlet a = 1;\r\n``\r\nlet b;\r\n```\r\ndone\r\n",
    "1. Step:\n\n   ```bash\n   make\n     indented\n   ```\n\n2. Next\n",
    "```\n" + "line\n" * 20 + "````x\nnot a closer\n```  \nclosed\n```\nreopened",
]


@pytest.mark.parametrize("text", FENCED)
def test_blocks_at_every_cut_are_the_blocks_of_the_text_so_far(text: str) -> None:
    """The open fence grows without being split again: what the stream gives at each cut is
    what splitting that text whole gives (closers, partial closers, longer fences, CRLF,
    indented fences, a fence opened again)."""
    for step in (1, 7, 23):  # a character at a time, and lines arriving whole
        stream = BlockStream()
        for cut in [*range(step, len(text), step), len(text)]:
            _, open_blocks = stream.update(text[:cut])
            got = [(p.kind, p.text, list(p.offsets), p.lang, p.closed, p.end)
                   for p in stream.finished + open_blocks]  # fmt: skip
            key = [(p.kind, p.text, list(p.offsets), p.lang, p.closed, p.end)
                   for p in split_blocks(text[:cut])]  # fmt: skip
            assert got == key, f"at {cut}: {text[:cut]!r}"


def test_finished_streamed_reply_is_the_message_a_reopened_chat_shows(qtbot) -> None:
    text = section(0) + MESSAGES["fences"] + MESSAGES["lists"]
    streamed, reopened = ChatView(), ChatView()
    for view in (streamed, reopened):
        qtbot.addWidget(view)
        view.resize(800, 600)
        view.set_colour_draft(True)
        view.add_message("user", "Explain, with code.", 1)
    streamed.start_assistant()
    for i, token in enumerate(tokens_of(text)):
        streamed.append_assistant([(token, i % 5 == 0)])
    mid = streamed.browser.toPlainText()
    assert "generating…" in mid and "def f0_3(x: int) -> int:" in mid
    streamed.finish_assistant(2, {"decode_tps": 40.0}, "eos")
    reopened.add_message("assistant", text, 2, {"decode_tps": 40.0, "reason": "eos"})
    tinted = streamed.browser.toHtml()
    assert tinted.count(streamed._theme.draft_bg) > 10
    # History keeps no draft mask: compare untinted, then both documents are the same.
    streamed.set_colour_draft(False)
    reopened.set_colour_draft(False)
    assert streamed.browser.toHtml() == reopened.browser.toHtml()


def test_live_region_lays_out_pieces_as_one_insert_would(qapp) -> None:
    head = '<p style="margin-top:0px; margin-bottom:4px;"><span>Assistant</span></p>'
    footer = '<table width="100%" border="0"><tr><td>generating…</td></tr></table>'
    kinds = [
        "<p>para <b>bold</b></p>",
        "<p>two</p><p>paragraphs</p>",
        '<table border="0" cellpadding="6" bgcolor="#eeeeee"><tr><td><pre>x = 1\ny</pre></td></tr>'
        "</table>",
        "<ul><li>a</li><li>b</li></ul>",
        '<ol start="3"><li>c</li></ol>',
        "<h2>Head</h2><p>after</p>",
        '<table border="1"><tr><td>cell</td><td>cell</td></tr></table>',
    ]

    def region() -> tuple[QTextDocument, LiveRegion]:
        doc = QTextDocument()
        cursor = QTextCursor(doc)
        cursor.insertHtml("<table><tr><td>an earlier message</td></tr></table>")
        cursor.movePosition(QTextCursor.MoveOperation.End)
        return doc, LiveRegion(doc, cursor.position(), "#f0f0f0", 10)

    def body(doc: QTextDocument) -> str:
        # Qt writes an empty style attribute on a list item after a table when it imported
        # the two together; it draws nothing.
        return doc.toHtml().split("<body", 1)[1].replace('style="" ', "")

    rng = random.Random(3)
    for _ in range(60):
        doc, live = region()
        pieces = [head, footer]
        for _ in range(rng.randint(1, 6)):  # keep a prefix, replace the rest: as a stream does
            keep = rng.randint(1, len(pieces) - 1)
            pieces = pieces[:keep] + [rng.choice(kinds) for _ in range(rng.randint(0, 3))]
            pieces.append(footer)
            live.show(pieces)
        whole_doc, whole = region()
        whole.show(["".join(pieces)])
        assert body(doc) == body(whole_doc)


def test_work_per_token_stays_flat_over_a_5000_token_reply(qtbot, theme, frozen_lexing) -> None:
    """GUI work per flush, counted in characters converted, lexed, split and inserted: the
    last tenth of a 5,000-token reply costs no more than twice the first tenth."""
    text = "".join(section(k) for k in range(40))
    tokens = tokens_of(text)[:5000]
    assert len(tokens) == 5000
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(800, 600)
    view.start_assistant()

    def work() -> int:
        region, reply = view._region, view._reply
        assert region is not None and reply is not None
        counted = asdict(WORK)
        return (
            counted["markdown_chars"]
            + counted["lexed_chars"]
            + reply.rendered_chars
            + reply.scanned_chars
            + region.inserted_chars
        )

    per_flush: list[int] = []
    conversions: list[int] = []
    for start in range(0, len(tokens), 5):  # 5 tokens a flush: 50 tok/s at 10 redraws/s
        frozen_lexing[0] += 0.1
        before, calls = work(), WORK.markdown_calls
        view.append_assistant([("".join(tokens[start : start + 5]), start % 3 == 0)])
        per_flush.append(work() - before)
        conversions.append(WORK.markdown_calls - calls)
    tenth = len(per_flush) // 10
    first, last = sum(per_flush[:tenth]), sum(per_flush[-tenth:])
    assert last <= 2 * first, f"work per flush grew from {first} to {last}"
    assert sum(conversions[-tenth:]) <= 2 * sum(conversions[:tenth])
    assert max(conversions) <= 2  # never the whole reply: the open block (and one finished)
    assert view.redraws == len(per_flush) + 1  # and the empty reply at the start


def test_the_open_fence_is_lexed_a_few_times_a_second(theme, frozen_lexing) -> None:
    reply = LiveReply(theme, False, "")
    text = "```python\n" + "".join(f"x{i} = {i}\n" for i in range(60))
    lexed = WORK.lex_calls
    for cut in range(12, len(text), 3):  # 25 updates a second for about 2 seconds
        frozen_lexing[0] += 0.04
        reply.pieces(text[:cut], None)
    updates = len(range(12, len(text), 3))
    assert WORK.lex_calls - lexed <= updates * 0.04 / markdown_render.LEX_EVERY_S + 1
    out = "".join(reply.pieces(text + "```\n", None))  # closed: lexed whole, once
    assert "x59" in out and "python …" not in out


@pytest.mark.parametrize("scrolled_up", [False, True])
def test_the_screen_after_each_flush_is_what_a_full_repaint_draws(qtbot, scrolled_up) -> None:
    """A flush repaints only from the first changed block down (the frame's own repaint
    would be all of it): what the window shows must still equal a fresh paint, following the
    reply or scrolled up to read it."""
    tokens = tokens_of("".join(section(k) for k in range(2)))
    view = ChatView()
    qtbot.addWidget(view)
    view.resize(800, 600)
    view.show()
    qtbot.waitExposed(view)
    view.start_assistant()
    screen = view.screen()
    compared = 0
    for start in range(0, len(tokens), 3):
        view.append_assistant([("".join(tokens[start : start + 3]), start % 2 == 0)])
        if scrolled_up and start == 150:
            view.browser.verticalScrollBar().setValue(40)
        QApplication.processEvents()  # the paint events
        if start % 30 == 0:
            shown = screen.grabWindow(view.winId()).toImage()
            fresh = view.grab().toImage().convertToFormat(shown.format())
            assert shown == fresh, f"stale pixels after {start} tokens"
            compared += 1
    assert compared > 10


def test_a_long_open_code_block_streams_as_runs_kept_once(theme, frozen_lexing) -> None:
    """A model writing a 400-line file inside one fence: the work per update stays flat (the
    complete runs of lines are kept, only the last is redone), the runs read as the code, and
    once the fence closes the block is one table again, as a full render makes it."""
    code = "".join(f"value_{i} = compute({i}, 'text')  # line {i}\n" for i in range(400))
    source = "Here is the file:\n\n```python\n" + code
    reply = LiveReply(theme, False, "flashchat:code/live/")
    start = len("Here is the file:\n\n```python\n")
    work: list[int] = []
    for cut in range(start + 40, len(source) + 1, 40):
        frozen_lexing[0] += 0.05
        before = reply.rendered_chars
        pieces = reply.pieces(source[:cut], None)
        work.append(reply.rendered_chars - before)
    tenth = len(work) // 10
    assert sum(work[-tenth:]) <= 2 * sum(work[:tenth]), (work[:tenth], work[-tenth:])
    runs = [p for p in pieces if "<table" in p]
    assert len(runs) == 400 // live_reply.CODE_RUN_LINES
    assert sum("Copy</span>" in p for p in runs) == 1  # one label row: one block to the eye
    shown = QTextDocument()
    shown.setHtml("".join(runs))
    label, copy, *lines = [line for line in shown.toPlainText().splitlines() if line]
    assert (label, copy) == ("python …", "Copy")
    assert lines == source[start:cut].splitlines()
    closed = reply.pieces(source + "```\n", None)
    assert sum("<table" in p for p in closed) == 1
    assert (
        "".join(closed)
        == render_markdown(source + "```\n", theme, None, "flashchat:code/live/").html
    )
