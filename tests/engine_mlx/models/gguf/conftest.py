"""Fixtures shared by the GGUF import tests: a trained tiny vocabulary, weights, GGUFs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from engine_mlx.models.gguf import import_gguf
from tests.engine_mlx.models.gguf.synthetic import (
    FFN,
    HEAD_DIM,
    HEADS,
    HIDDEN,
    KV_HEADS,
    LAYERS,
    SPECIALS,
    TRAINING_TEXT,
    VARIANTS,
    add_llama3_rope,
    encode_tensors,
    write_gguf,
)


@pytest.fixture(scope="session")
def tiny_vocab() -> dict[str, Any]:
    """A byte-level BPE trained here (SmolLM2-style digit splitting), in GGUF's flat form."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([TRAINING_TEXT] * 4, trainer)
    model = json.loads(tok.to_str())["model"]
    tokens = [""] * len(model["vocab"])
    for text, i in model["vocab"].items():
        tokens[i] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    types = [3 if t in SPECIALS else 1 for t in tokens]
    assert tokens[:3] == SPECIALS and len(merges) > 50
    return {"tokens": tokens, "types": types, "merges": merges, "reference": tok}


@pytest.fixture(scope="session")
def hf_weights(tiny_vocab: dict[str, Any]) -> dict[str, np.ndarray]:
    """The "original" HF checkpoint the synthetic GGUFs are converted from."""
    rng = np.random.default_rng(0)
    vocab = len(tiny_vocab["tokens"])
    shapes = {
        "model.embed_tokens.weight": (vocab, HIDDEN),
        "model.norm.weight": (HIDDEN,),
        "lm_head.weight": (vocab, HIDDEN),
    }
    for i in range(LAYERS):
        m = f"model.layers.{i}."
        shapes |= {
            m + "input_layernorm.weight": (HIDDEN,),
            m + "post_attention_layernorm.weight": (HIDDEN,),
            m + "self_attn.q_proj.weight": (HEADS * HEAD_DIM, HIDDEN),
            m + "self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            m + "self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
            m + "self_attn.o_proj.weight": (HIDDEN, HEADS * HEAD_DIM),
            m + "mlp.gate_proj.weight": (FFN, HIDDEN),
            m + "mlp.up_proj.weight": (FFN, HIDDEN),
            m + "mlp.down_proj.weight": (HIDDEN, FFN),
        }
    out = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            out[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (0.1 * rng.standard_normal(shape)).astype(np.float32)
    return out


@pytest.fixture(scope="session")
def tiny_ggufs(
    tmp_path_factory: pytest.TempPathFactory,
    tiny_vocab: dict[str, Any],
    hf_weights: dict[str, np.ndarray],
) -> dict[str, tuple[Path, dict[str, np.ndarray]]]:
    """variant -> (GGUF path, expected float32 HF tensors)."""
    folder = tmp_path_factory.mktemp("tiny_gguf")
    out = {}
    for variant, types in VARIANTS.items():
        payloads, expected = encode_tensors(hf_weights, types)
        extra = add_llama3_rope if variant == "numpy" else None
        path = write_gguf(folder / f"tiny-{variant}.gguf", tiny_vocab, payloads, extra=extra)
        out[variant] = (path, expected)
    return out


@pytest.fixture(scope="session", params=sorted(VARIANTS))
def tiny_import(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    tiny_ggufs: dict[str, tuple[Path, dict[str, np.ndarray]]],
) -> SimpleNamespace:
    variant = request.param
    path, expected = tiny_ggufs[variant]
    out = tmp_path_factory.mktemp(f"tiny_import_{variant}") / "model"
    assert import_gguf(path, out, dtype="float32") == out
    return SimpleNamespace(variant=variant, gguf=path, folder=out, expected=expected)


@pytest.fixture
def mlx_gguf(tmp_path: Path, tiny_ggufs: dict[str, tuple[Path, dict]]) -> Path:
    """A private copy of the mx-native tiny GGUF (tests may modify or truncate it)."""
    return Path(shutil.copy2(tiny_ggufs["mlx"][0], tmp_path / "tiny.gguf"))
