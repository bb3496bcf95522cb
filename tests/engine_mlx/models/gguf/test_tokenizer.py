"""The rebuilt tokenizer: llama.cpp's pre-tokenizer regexes, the original's ids, BOS/EOT."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from gguf import GGUFWriter

from engine_mlx.errors import GGUFImportError
from engine_mlx.models.gguf import import_gguf, tokenizer
from engine_mlx.models.gguf.reader import GGUFFile
from tests.engine_mlx.models.gguf.synthetic import (
    BOS,
    EOS,
    LAYERS,
    MLX_TYPES,
    SAMPLES,
    encode_tensors,
    read_json,
    write_gguf,
)


def test_pre_tokenizers_follow_llama_cpp_regexes() -> None:
    def digit_pieces(pre: str) -> list[str]:
        g = GGUFFile(Path("x.gguf"), 0, {"tokenizer.ggml.pre": pre}, {}, 0)
        pre_tok, _ = tokenizer._pre_tokenizer(g, False)
        pieces = pre_tok.pre_tokenize_str("Hello 12345 world")
        return [p.lstrip("Ġ") for p, _ in pieces if any(c.isdigit() for c in p)]

    assert digit_pieces("gpt-2") == ["12345"]
    assert digit_pieces("smollm") == ["1", "2", "3", "4", "5"]
    assert digit_pieces("llama-bpe") == ["123", "45"]
    assert digit_pieces("qwen2") == ["1", "2", "3", "4", "5"]
    with pytest.raises(GGUFImportError, match=r"x\.gguf.*made-up"):
        digit_pieces("made-up")


def test_tiny_tokenizer_matches_the_original(
    tiny_import: SimpleNamespace, tiny_vocab: dict
) -> None:
    from tokenizers import Tokenizer

    imported = Tokenizer.from_file(str(tiny_import.folder / "tokenizer.json"))
    reference = tiny_vocab["reference"]
    for text in SAMPLES:
        ids = imported.encode(text).ids
        assert ids == reference.encode(text).ids, text
        assert imported.decode(ids, skip_special_tokens=False) == text
    assert imported.encode("<|im_start|>").ids == [1]


def test_add_bos_eot_and_progress(
    tmp_path: Path, tiny_vocab: dict, hf_weights: dict[str, np.ndarray]
) -> None:
    """Llama 3-style metadata: BOS added by the tokenizer itself, an extra end-of-turn id."""
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    def llama3_style(writer: GGUFWriter) -> None:
        writer.add_add_bos_token(True)
        writer.add_eot_token_id(0)

    payloads, _ = encode_tensors(hf_weights, MLX_TYPES)
    path = write_gguf(
        tmp_path / "bos.gguf",
        tiny_vocab,
        payloads,
        pre="llama-bpe",
        drop_meta=("add_bos",),
        extra=llama3_style,
    )
    calls: list[tuple[int, int]] = []
    out = import_gguf(
        path, tmp_path / "m", progress=lambda done, total: calls.append((done, total))
    )
    total = 2 + 9 * LAYERS + 1  # embeddings, 9 per layer, final norm, lm_head
    assert calls == [(i, total) for i in range(1, total + 1)]

    assert Tokenizer.from_file(str(out / "tokenizer.json")).encode("Hi").ids[0] == BOS
    hf_tok = AutoTokenizer.from_pretrained(str(out))
    ids = hf_tok("Hi there")["input_ids"]
    assert ids[0] == BOS and ids.count(BOS) == 1
    assert hf_tok.decode(ids, skip_special_tokens=True) == "Hi there"
    assert read_json(out / "generation_config.json")["eos_token_id"] == [EOS, 0]
    assert read_json(out / "config.json")["eos_token_id"] == [EOS, 0]
    assert read_json(out / "tokenizer_config.json")["add_bos_token"] is True
