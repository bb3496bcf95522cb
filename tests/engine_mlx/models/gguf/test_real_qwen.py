"""The real Qwen2.5-Coder-0.5B-Instruct GGUF (Q4_K_M, qwen2): every quantization type in it
dequantized exactly as gguf-py does, its config and tokenizer, and a known greedy answer."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader, quants

from engine_mlx.config import GenerationConfig
from engine_mlx.models.gguf.reader import load_mx_native, read_gguf, take_dequantized
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session
from tests.engine_mlx.models.gguf.synthetic import read_json

pytestmark = pytest.mark.slow


def test_every_quantization_type_matches_gguf_py(qwen_gguf: Path) -> None:
    """gguf-py's own reader locates the bytes (independently of ours) and dequantizes them."""
    ours = read_gguf(qwen_gguf)
    assert load_mx_native(ours) is None  # mx.load fails on this file's Q5_0: never used
    by_type: dict[int, list] = defaultdict(list)
    for tensor in GGUFReader(qwen_gguf).tensors:
        by_type[int(tensor.tensor_type)].append(tensor)
    assert {T(t).name for t in by_type} == {"F32", "Q5_0", "Q8_0", "Q4_K", "Q6_K"}
    for qtype, tensors in by_type.items():
        for tensor in (tensors[0], tensors[-1]):  # first and last of each type in the file
            expected = quants.dequantize(np.asarray(tensor.data), T(qtype)).reshape(
                ours.tensors[tensor.name].shape
            )
            got = np.array(take_dequantized(ours, None, ours.tensors[tensor.name]))
            assert np.array_equal(got, expected.astype(np.float32)), tensor.name


def test_config_and_tokenizer(qwen_dir: Path) -> None:
    config = read_json(qwen_dir / "config.json")
    assert config["model_type"] == "qwen2" and config["architectures"] == ["Qwen2ForCausalLM"]
    got = {k: config[k] for k in ("num_hidden_layers", "hidden_size", "num_attention_heads")}
    assert got == {"num_hidden_layers": 24, "hidden_size": 896, "num_attention_heads": 14}
    assert config["num_key_value_heads"] == 2 and config["vocab_size"] == 151936
    assert config["attention_bias"] is True and config["tie_word_embeddings"] is False
    assert config["rope_theta"] == 1_000_000.0 and config["eos_token_id"] == 151645

    tok = TargetModel.load(qwen_dir).tokenizer
    assert tok.encode("Hello world", add_special_tokens=False) == [9707, 1879]
    for text in ("def f(x):\n    return x ** 2  # ünïcödé 漢字 🙂", "  spaces\t\ttabs\n\n"):
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text
    chat = tok.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False
    )
    assert chat.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>system\n" in chat  # Qwen's default system prompt comes from its template


def test_known_greedy_answer(qwen_dir: Path) -> None:
    target = TargetModel.load(qwen_dir)
    messages = [
        {"role": "user", "content": "What is the capital of France? Answer in one sentence."}
    ]
    ids = target.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    result = list(Session(target).generate(ids, GenerationConfig(max_tokens=24, mode="ar")))[-1]
    assert result.text.strip() == "The capital of France is Paris."
