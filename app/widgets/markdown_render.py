"""Markdown -> HTML for Qt's rich-text engine, with pygments-highlighted fenced code blocks.

Qt's own Markdown importer (``QTextDocument.setMarkdown``) handles prose: it speaks the same
HTML subset that ``QTextBrowser`` renders, so nothing gets lost in translation. Fenced code is
cut out first and highlighted here instead, because Qt would only show it as plain monospace.
Doing the fence split ourselves also lets an unclosed fence mid-stream render as a code block.

Everything is keyed on plain values (text, a :class:`Theme`, an optional per-character draft
mask) so the chat view can cache finished messages and re-render only the streaming one.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from pygments.lexer import Lexer
from pygments.lexers import get_lexer_by_name
from pygments.style import StyleMeta
from pygments.styles import get_style_by_name
from pygments.token import Token
from pygments.util import ClassNotFound
from PySide6.QtGui import QColor, QFontDatabase, QPalette, QTextDocument

from app.widgets.markdown_blocks import Part, code_blocks, split_blocks, split_fences

__all__ = ["Part", "Rendered", "Theme", "code_blocks", "render_markdown", "split_fences"]

LIGHT_CODE_STYLE = "default"
DARK_CODE_STYLE = "monokai"

# Where a tinted character is matched back to its Markdown source: syntax (link targets,
# emphasis markers) sits between rendered characters, but rarely more than this much of it.
_ALIGN_WINDOW = 256

_TAG_OR_TEXT = re.compile(r"(<[^>]*>)|([^<]+)")
_WHITESPACE = re.compile(r"\s")
_LINK_SPAN_COLOUR = re.compile(r'(<a href="[^"]*"><span style="[^"]*?) ?color:#[0-9a-fA-F]{6};')
_HEADING_MARGINS = re.compile(r'(<h[1-6] style=") margin-top:0px; margin-bottom:0px;')
_HEADING_SIZES = {"xx-large": "x-large", "x-large": "large"}
_HEADING_SIZE = re.compile(r"font-size:(xx-large|x-large);")


def mix(a: QColor, b: QColor, t: float) -> QColor:
    """``a`` moved ``t`` of the way towards ``b``: tints that follow the palette, not constants."""
    return QColor.fromRgbF(
        a.redF() + (b.redF() - a.redF()) * t,
        a.greenF() + (b.greenF() - a.greenF()) * t,
        a.blueF() + (b.blueF() - a.blueF()) * t,
    )


def contrast(a: QColor, b: QColor) -> float:
    """WCAG contrast ratio (1..21): lightness alone misjudges saturated blue on black."""

    def luminance(c: QColor) -> float:
        def linear(v: float) -> float:
            return v / 12.92 if v <= 0.04045 else ((v + 0.055) / 1.055) ** 2.4

        return 0.2126 * linear(c.redF()) + 0.7152 * linear(c.greenF()) + 0.0722 * linear(c.blueF())

    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


@dataclass(frozen=True)
class Theme:
    """The colours a render needs, as ``#rrggbb`` strings; hashable so renders can be cached."""

    dark: bool
    text: str
    muted: str
    link: str
    user_bg: str
    assistant_bg: str
    code_bg: str
    inline_code_bg: str
    border: str
    draft_bg: str
    code_style: str

    @classmethod
    def from_palette(cls, palette: QPalette) -> Theme:
        """Derive every colour from palette roles so light and dark modes both read well."""
        role = QPalette.ColorRole
        base = palette.color(role.Base)
        text = palette.color(role.Text)
        accent = palette.color(role.Highlight)
        link = palette.color(role.Link)
        dark = base.lightnessF() < 0.5
        user_bg = mix(base, accent, 0.22 if dark else 0.13)
        step = 0.0
        while step < 1 and min(contrast(link, base), contrast(link, user_bg)) < 4.5:
            # Many hand-made dark palettes leave Link at Qt's default dark blue.
            step += 0.1
            link = mix(palette.color(role.Link), text, step)
        return cls(
            dark=dark,
            text=text.name(),
            muted=mix(text, base, 0.45).name(),
            link=link.name(),
            user_bg=user_bg.name(),
            assistant_bg=mix(base, text, 0.05 if dark else 0.035).name(),
            code_bg=mix(base, text, 0.11 if dark else 0.075).name(),
            inline_code_bg=mix(base, text, 0.14 if dark else 0.09).name(),
            border=mix(base, text, 0.25).name(),
            draft_bg=mix(base, accent, 0.38 if dark else 0.24).name(),
            code_style=DARK_CODE_STYLE if dark else LIGHT_CODE_STYLE,
        )


@dataclass
class RenderWork:
    """What rendering cost, in deterministic units (tests hold streaming to these, not to
    wall time): Markdown conversions and pygments runs, and the characters each handled."""

    markdown_calls: int = 0
    markdown_chars: int = 0
    lex_calls: int = 0
    lexed_chars: int = 0
    blocks: int = 0  # blocks rendered (cache misses)


WORK = RenderWork()


@dataclass(frozen=True)
class Rendered:
    """HTML for a message body, plus its code blocks in order (their "Copy" link numbers)."""

    html: str
    code_blocks: list[str]


def block_mask(part: Part, draft_mask: Sequence[int] | None) -> bytes | None:
    """The block's slice of a per-character draft mask; None when none of it is drafted."""
    if draft_mask is None:
        return None
    offsets = part.offsets
    if isinstance(offsets, range) and isinstance(draft_mask, bytes | bytearray):
        mask = bytes(draft_mask[offsets.start : offsets.stop])
    else:
        mask = bytes(1 if draft_mask[k] else 0 for k in offsets)
    return mask if any(mask) else None


def render_markdown(
    source: str,
    theme: Theme,
    draft_mask: Sequence[int] | None = None,
    code_href: str = "",
    streaming: bool = False,
) -> Rendered:
    """Render ``source``; characters whose ``draft_mask`` entry is true get the draft tint.

    ``code_href`` is the prefix of each code block's copy link; the block's index is appended.
    ``streaming`` says ``source`` is a reply still growing: its open code block is lexed
    incrementally and its last block is not cached. The HTML is the blocks' HTML joined, so a
    reply rendered block by block as it streamed (``live_reply``) ends up the same.
    """
    out: list[str] = []
    blocks: list[str] = []
    parts = split_blocks(source)
    for part in parts:
        href = f"{code_href}{len(blocks)}" if part.kind == "code" else ""
        live = streaming and part is parts[-1]
        out.append(render_block(part, theme, block_mask(part, draft_mask), href, live))
        if part.kind == "code":
            blocks.append(part.text)
    return Rendered("".join(out), blocks)


def render_block(part: Part, theme: Theme, mask: bytes | None, href: str, live: bool) -> str:
    """One block's HTML; a finished block (``live`` false) comes from a cache keyed by its
    text, so a message re-rendered (finished, a theme change) converts only what is new."""
    if live:
        return _block_html(part.kind, part.text, part.lang, part.closed, theme, mask, href, True)
    return _cached_block_html(part.kind, part.text, part.lang, part.closed, theme, mask, href)


def _block_html(
    kind: str,
    text: str,
    lang: str,
    closed: bool,
    theme: Theme,
    mask: bytes | None,
    href: str,
    live: bool,
) -> str:
    WORK.blocks += 1
    if kind == "code":
        part = Part("code", text, range(len(text)), lang, closed)
        return _code_block_html(part, theme, mask, href, live and not closed)
    if not text.strip():
        return ""
    # The growing tail of a live reply would only churn the cache.
    body = _style_prose((_qt_markdown_body.__wrapped__ if live else _qt_markdown_body)(text), theme)
    if mask is not None:
        body = tint_prose(body, text, mask, theme.draft_bg)
    return body


@lru_cache(maxsize=1024)
def _cached_block_html(
    kind: str,
    text: str,
    lang: str,
    closed: bool,
    theme: Theme,
    mask: bytes | None,
    href: str,
) -> str:
    return _block_html(kind, text, lang, closed, theme, mask, href, False)


@lru_cache(maxsize=512)
def _qt_markdown_body(text: str) -> str:
    """Qt's HTML for Markdown prose, inner ``<body>`` only; cached since finished prose repeats."""
    WORK.markdown_calls += 1
    WORK.markdown_chars += len(text)
    doc = QTextDocument()
    doc.setMarkdown(text, QTextDocument.MarkdownFeature.MarkdownDialectGitHub)
    full = doc.toHtml()
    start = full.find(">", full.find("<body")) + 1
    end = full.rfind("</body>")
    return full[start:end].strip("\n")


@lru_cache(maxsize=1)
def _fixed_family() -> str:
    """The font Qt's Markdown importer gives inline code (platform-dependent), to shade it."""
    return QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont).family()


def _style_prose(body: str, theme: Theme) -> str:
    """Swap Qt's fixed colours and sizes for ones that suit a chat bubble and the palette."""
    body = _LINK_SPAN_COLOUR.sub(rf"\1 color:{theme.link};", body)
    body = _HEADING_MARGINS.sub(r"\1 margin-top:10px; margin-bottom:4px;", body)
    body = _HEADING_SIZE.sub(lambda m: f"font-size:{_HEADING_SIZES[m.group(1)]};", body)
    fixed = f"font-family:'{_fixed_family()}';"
    body = body.replace(fixed, f"{fixed} background-color:{theme.inline_code_bg};")
    return body.replace(
        '<table border="1" style=" border-collapse:collapse;"',
        f'<table border="1" style=" border-collapse:collapse; border-color:{theme.border};"',
    )


def tint_prose(body: str, source: str, mask: Sequence[int], colour: str) -> str:
    """Give rendered characters that came from flagged source characters a background.

    Rendered text is (nearly) a subsequence of its Markdown source, so each character is
    matched greedily to the next equal source character; spans are opened and closed inside
    each text node, which keeps the HTML well nested whatever the draft boundaries are.
    """
    out: list[str] = []
    pos = 0
    n = len(source)
    for match in _TAG_OR_TEXT.finditer(body):
        tag, raw = match.group(1), match.group(2)
        if tag is not None or not raw.strip():
            out.append(match.group(0))  # tags, and the newlines Qt puts between blocks
            continue
        flags: list[bool] = []
        text = html.unescape(raw)
        for ch in text:
            if pos < n and source[pos] == ch:
                j = pos
            elif ch.isspace():
                found = _WHITESPACE.search(source, pos, pos + _ALIGN_WINDOW)
                j = found.start() if found else -1
            else:
                j = source.find(ch, pos, pos + _ALIGN_WINDOW)
            if j >= 0:
                pos = j + 1
                flags.append(bool(mask[j]))
            else:  # a character Qt made up: inherit its neighbour's flag
                flags.append(bool(mask[pos - 1]) if pos else False)
        out.append(_wrap_runs(text, flags, colour))
    return "".join(out)


def _wrap_runs(text: str, flags: Sequence[bool], colour: str) -> str:
    """Escape ``text``, wrapping each flagged run in a background-coloured span."""
    out: list[str] = []
    start = 0
    for k in range(1, len(text) + 1):
        if k == len(text) or flags[k] != flags[start]:
            chunk = html.escape(text[start:k], quote=False)
            out.append(
                f'<span style="background-color:{colour};">{chunk}</span>'
                if flags[start]
                else chunk
            )
            start = k
    return "".join(out)


def _code_block_html(
    part: Part, theme: Theme, mask: Sequence[int] | None, href: str, live: bool
) -> str:
    """A code block as a shaded table: language label, a "Copy" link, highlighted code."""
    return code_piece_html(part, theme, mask, href, live, first=True, last=True)


def code_piece_html(
    part: Part,
    theme: Theme,
    mask: Sequence[int] | None,
    href: str,
    live: bool,
    *,
    first: bool,
    last: bool,
) -> str:
    """A code block's table, or one of the tables a long open block streams as (its lines
    cut in runs, ``LiveReply``): only the ``first`` has the label row and the top margin,
    only the ``last`` the bottom one, and the code rows meet without padding, so the pieces
    stack as one shaded block."""
    label = html.escape(part.lang or "code") + ("" if part.closed else " …")
    spans: list[str] = []
    k = 0
    for value, style in _highlight(part.text, part.lang, theme.code_style, live):
        if mask is None:
            piece = html.escape(value, quote=False)
        else:
            piece = _wrap_runs(value, [bool(f) for f in mask[k : k + len(value)]], theme.draft_bg)
        k += len(value)
        spans.append(f'<span style="{style}">{piece}</span>' if style else piece)
    head = (
        f'<tr><td><span style="font-size:small; color:{theme.muted};">{label}</span></td>'
        f'<td align="right"><a href="{href}"><span style="font-size:small; color:{theme.link}; '
        'text-decoration:none;">Copy</span></a></td></tr>'
    )
    pads = ("" if first else " padding-top:0px;") + ("" if last else " padding-bottom:0px;")
    cell = f' style="{pads.strip()}"' if pads else ""
    return (
        f'<table width="100%" border="0" cellspacing="0" cellpadding="6" bgcolor="{theme.code_bg}"'
        f' style="margin-top:{6 if first else 0}px; margin-bottom:{6 if last else 0}px;">'
        f"{head if first else ''}"
        f'<tr><td colspan="2"{cell}><pre style="white-space:pre-wrap; '
        f'margin-top:0px; margin-bottom:0px;">{"".join(spans)}</pre></td></tr></table>'
    )


def _highlight(code: str, lang: str, style_name: str, streaming: bool) -> list[tuple[str, str]]:
    """(text, inline CSS) runs, adjacent runs of the same look merged."""
    style = get_style_by_name(style_name)
    runs: list[tuple[str, str]] = []
    for ttype, value in _stream_tokens(code, lang) if streaming else _tokens(code, lang):
        css = _token_css(style, ttype)
        if runs and runs[-1][1] == css:
            runs[-1] = (runs[-1][0] + value, css)
        else:
            runs.append((value, css))
    return runs


Tokens = tuple[tuple[object, str], ...]  # (pygments token type, text)


@lru_cache(maxsize=256)
def _tokens(code: str, lang: str) -> Tokens:
    """Lex a whole block; cached because finished messages are re-rendered on theme changes."""
    lexer = _lexer(lang)
    if lexer is None:
        return ((Token.Text, code),)
    WORK.lex_calls += 1
    WORK.lexed_chars += len(code)
    tokens = tuple(lexer.get_tokens(code))
    if "".join(value for _, value in tokens) != code:  # a lexer that rewrote the text
        return ((Token.Text, code),)
    return tokens


# The code block still streaming in, per language: its text, its tokens and when it was lexed.
_streaming_memo: dict[str, tuple[str, Tokens, float]] = {}
# The open block is lexed at most this often; text that arrives between shows uncoloured.
LEX_EVERY_S = 0.25
clock = time.monotonic  # replaced by tests that drive the lexing pace by hand


def _stream_tokens(code: str, lang: str) -> Tokens:
    """Lex a growing block by re-lexing only from its last safe line start.

    Re-lexing the whole block on every update would make a long block cost more each frame.
    A line start is safe when the token ending the previous line is not inside a string or
    comment, i.e. the lexer is (almost surely) back in its initial state; a rare miss only
    mis-colours the live block until it finishes, when it is lexed whole. Within
    ``LEX_EVERY_S`` of the last lexing, new text is shown as plain text after the last tokens.
    """
    lexer = _lexer(lang)
    if lexer is None:
        return ((Token.Text, code),)
    keep, offset = 0, 0
    now = clock()
    memo = _streaming_memo.get(lang)
    if memo is not None and code.startswith(memo[0]):
        if now - memo[2] < LEX_EVERY_S:
            rest = code[len(memo[0]) :]
            return memo[1] + ((Token.Text, rest),) if rest else memo[1]
        keep, offset = _safe_restart(memo[0], memo[1])
    WORK.lex_calls += 1
    WORK.lexed_chars += len(code) - offset
    tail = tuple(lexer.get_tokens(code[offset:]))
    if "".join(value for _, value in tail) != code[offset:]:
        return ((Token.Text, code),)
    tokens = memo[1][:keep] + tail if memo is not None and keep else tail
    _streaming_memo[lang] = (code, tokens, now)
    return tokens


def _safe_restart(code: str, tokens: Tokens) -> tuple[int, int]:
    """(tokens to keep, offset to re-lex from): just after the last newline in a safe token."""
    end = len(code)
    for index in range(len(tokens) - 1, -1, -1):
        ttype, value = tokens[index]
        if (
            value.endswith("\n")
            and ttype not in Token.Literal.String
            and ttype not in Token.Comment
        ):
            return index + 1, end
        end -= len(value)
    return 0, 0


@lru_cache(maxsize=64)
def _lexer(lang: str) -> Lexer | None:
    """A lexer that keeps the text byte-for-byte (so draft offsets line up), or None."""
    if not lang:
        return None
    try:
        return get_lexer_by_name(lang, stripnl=False, stripall=False, ensurenl=False)
    except ClassNotFound:
        return None


@lru_cache(maxsize=2048)
def _token_css(style: StyleMeta, ttype: object) -> str:
    """Inline CSS for one token type, the way HtmlFormatter(noclasses=True) would write it."""
    if ttype is Token.Error:
        return ""  # mid-stream code is often incomplete; don't paint it as an error
    spec = style.style_for_token(ttype)
    css: list[str] = []
    if spec["color"]:
        css.append(f"color:#{spec['color']};")
    if spec["bold"]:
        css.append("font-weight:700;")
    if spec["italic"]:
        css.append("font-style:italic;")
    return " ".join(css)
