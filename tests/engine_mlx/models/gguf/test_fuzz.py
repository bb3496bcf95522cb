"""Fuzzing GGUF headers: damaged bytes anywhere in the header, and metadata values of the
wrong type or range, end in a GGUFImportError naming the file (or a finished import), never
another exception, and never a write outside the chosen output folder."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_mlx.errors import GGUFImportError
from engine_mlx.models.gguf import import_gguf
from engine_mlx.models.gguf.reader import read_gguf
from tests.engine_mlx.models.gguf.synthetic import MLX_TYPES, encode_tensors, write_gguf

pytestmark = pytest.mark.slow  # fuzzing: seconds, not milliseconds

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# The write_gguf metadata names and the GGUF keys they set.
KEYS = {
    "block_count": "llama.block_count",
    "context_length": "llama.context_length",
    "embedding_length": "llama.embedding_length",
    "feed_forward_length": "llama.feed_forward_length",
    "head_count": "llama.attention.head_count",
    "head_count_kv": "llama.attention.head_count_kv",
    "rope_freq_base": "llama.rope.freq_base",
    "rms_eps": "llama.attention.layer_norm_rms_epsilon",
    "vocab_size": "llama.vocab_size",
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "tokenizer_model": "tokenizer.ggml.model",
    "pre": "tokenizer.ggml.pre",
    "chat_template": "tokenizer.chat_template",
}
VALUES = st.one_of(
    st.tuples(st.just("uint32"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("int32"), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just("uint64"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("float32"), st.floats(width=32)),
    st.tuples(st.just("bool"), st.booleans()),
    st.tuples(st.just("string"), st.text(max_size=20)),
    st.tuples(st.just("array"), st.lists(st.integers(0, 100), max_size=4)),
)


def _attempt(gguf: Path, out: Path) -> None:
    try:
        import_gguf(gguf, out)
    except GGUFImportError as exc:
        assert gguf.name in str(exc)
    outside = [p for p in out.parent.iterdir() if p not in (gguf, out)]
    assert outside == []


@FUZZ
@given(changes=st.dictionaries(st.sampled_from(sorted(KEYS)), VALUES, min_size=1, max_size=3))
def test_fuzzed_metadata_values(tiny_vocab, hf_weights, changes: dict[str, Any]) -> None:
    payloads, _ = encode_tensors(hf_weights, MLX_TYPES)

    def add(writer) -> None:
        for name, (kind, value) in changes.items():
            getattr(writer, f"add_{kind}")(KEYS[name], value)

    with tempfile.TemporaryDirectory() as tmp:
        gguf = write_gguf(
            Path(tmp) / "m.gguf", tiny_vocab, payloads, drop_meta=tuple(changes), extra=add
        )
        _attempt(gguf, Path(tmp) / "out")


@FUZZ
@given(data=st.data())
def test_damaged_header_bytes(tiny_vocab, hf_weights, data) -> None:
    payloads, _ = encode_tensors(hf_weights, MLX_TYPES)
    with tempfile.TemporaryDirectory() as tmp:
        gguf = write_gguf(Path(tmp) / "m.gguf", tiny_vocab, payloads)
        raw = bytearray(gguf.read_bytes())
        header_end = read_gguf(gguf).data_start
        for _ in range(data.draw(st.integers(1, 6))):
            at = data.draw(st.integers(4, header_end - 1))
            raw[at] = data.draw(st.integers(0, 255))
        if data.draw(st.booleans()):
            raw = raw[: data.draw(st.integers(0, len(raw)))]
        gguf.write_bytes(bytes(raw))
        _attempt(gguf, Path(tmp) / "out")
