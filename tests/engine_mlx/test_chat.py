"""Chat templates, UTF-8-safe streaming, and stop strings."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_mlx.api import encode_prompt
from engine_mlx.chat import ChatFormatter, IncrementalDetokenizer, StopStringFilter
from engine_mlx.errors import ChatTemplateError
from engine_mlx.models.target import TargetModel
from tests.support.tiny_models import build_tiny_model

TEXTS = ["Héllo wörld 日本語 🙂 ∑ x² ≤ π", "def add(a, b):\n    return a + b", "  spaced   out  "]


@pytest.mark.parametrize("text", TEXTS)
def test_streaming_never_splits_a_character(tiny_target, text):
    tok = tiny_target("llama").tokenizer
    ids = tok.encode(text)
    detok = IncrementalDetokenizer(tok)
    pieces = [detok.add([i]) for i in ids] + [detok.flush()]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == tok.decode(ids) == text


def test_chat_template_renders_messages(tiny_target):
    target = tiny_target("qwen3")
    ids = encode_prompt(target, "Hi there", system="Be brief.")
    text = target.tokenizer.decode(ids)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>")
    assert text.endswith("<|im_start|>assistant\n")
    assert encode_prompt(target, "Hi there", chat=False) == target.tokenizer.encode("Hi there")


def test_model_without_template_gives_clear_error(tmp_path):
    target = TargetModel.load(build_tiny_model("llama", tmp_path / "m", chat_template=False))
    assert not ChatFormatter(target.tokenizer).has_template
    with pytest.raises(ChatTemplateError, match="no chat template"):
        encode_prompt(target, [{"role": "user", "content": "hi"}])
    assert encode_prompt(target, "hi") == target.tokenizer.encode("hi")  # falls back to raw


def test_malformed_messages(tiny_target):
    with pytest.raises(ChatTemplateError, match="role"):
        encode_prompt(tiny_target("qwen3"), [{"content": "no role"}])


@settings(max_examples=80, deadline=None)
@given(
    st.text(alphabet="abc<|>END", max_size=40),
    st.lists(st.integers(1, 6), min_size=1, max_size=30),
)
def test_stop_filter_equals_cut_at_first_stop(text, splits):
    stops = ["<|END|>", "cab"]
    flt = StopStringFilter(stops)
    out, pos, i = [], 0, 0
    while pos < len(text) and not flt.stopped:
        n = splits[i % len(splits)]
        out.append(flt.feed(text[pos : pos + n]))
        pos, i = pos + n, i + 1
    out.append(flt.flush())
    hits = [text.find(s) for s in stops if s in text]
    expected = text[: min(hits)] if hits else text
    assert "".join(out) == expected
    assert flt.stopped == bool(hits)
