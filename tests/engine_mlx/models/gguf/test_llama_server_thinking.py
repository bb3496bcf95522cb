"""The app's remote model against a real llama-server running a thinking model: reasoning
comes apart from the answer, and tau is read from llama.cpp's timings.

The model is a tiny random llama written as a GGUF with ``<think>`` tokens and a
Qwen3.5-style template (llama.cpp recognises the old Qwen thinking template and opens the
reasoning block the generation prompt opens). llama-server's own ``--reasoning-budget``
ends the reasoning (a random model would never), and the same GGUF drafts for itself, so
its timings carry draft counts. This is the path a user takes when the model runs on a server.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from engine_mlx.bench.llama_server import start_server as start_llama_server
from engine_mlx.config import GenerationConfig
from engine_mlx.events import Finished, Tokens
from engine_mlx.remote import Endpoint, RemoteSession, normalise_url
from tests.conftest import require_asset
from tests.engine_mlx.models.gguf import synthetic as syn
from tests.engine_mlx.models.gguf.test_llama_cpp_parity import SERVER, _hf_shape
from tests.support.tiny_models import THINKING_TEMPLATES

pytestmark = pytest.mark.slow
THINK = ["<think>", "</think>"]


@pytest.fixture(scope="module")
def thinking_gguf(tmp_path_factory) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=syn.SPECIALS + THINK,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([syn.TRAINING_TEXT] * 4, trainer)
    model = json.loads(tok.to_str())["model"]
    tokens = [""] * len(model["vocab"])
    for text, i in model["vocab"].items():
        tokens[i] = text
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    # Qwen3 marks <think> and </think> user-defined (4), so they are text a parser sees
    types = [3 if t in syn.SPECIALS else 4 if t in THINK else 1 for t in tokens]
    vocab: dict[str, Any] = {"tokens": tokens, "types": types, "merges": merges}
    rng = np.random.default_rng(0)
    weights = {}
    for _, hfname, _heads in syn.NAMES:
        shape = _hf_shape(hfname, len(tokens))
        scale, base = (0.1, 1.0) if len(shape) == 1 else (0.3, 0.0)
        weights[hfname] = (base + scale * rng.standard_normal(shape)).astype(np.float32)
    payloads, _ = syn.encode_tensors(weights, {g: T.F32 for g, _, _ in syn.NAMES})
    folder = tmp_path_factory.mktemp("thinking_gguf")
    template = THINKING_TEMPLATES["qwen3_5"]
    return syn.write_gguf(
        folder / "thinker.gguf",
        vocab,
        payloads,
        drop_meta=("chat_template",),
        extra=lambda writer: writer.add_chat_template(template),
    )


@pytest.fixture(scope="module")
def llama_server(thinking_gguf, tmp_path_factory):
    binary = require_asset(SERVER, "llama-server (scripts/build_llama_cpp.sh; `make test` runs it)")
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    args = [
        "-m", str(thinking_gguf), "--jinja", "--reasoning-format", "deepseek",
        "--reasoning-budget", "4", "-md", str(thinking_gguf), "--spec-type", "draft-simple",
        "--spec-draft-n-max", "4", "-c", "512", "-np", "1", "-t", "2", "-fa", "off",
    ]  # fmt: skip
    process, port = start_llama_server(binary, args, log)
    yield f"http://127.0.0.1:{port}", log
    process.terminate()
    process.wait(timeout=30)


def test_a_remote_thinking_model_streams_its_reasoning_apart(llama_server):
    url, log = llama_server
    session = RemoteSession(Endpoint(normalise_url(url), "thinker"))
    messages = [{"role": "user", "content": "Hello world, hello again."}]
    events = list(session.generate(messages, GenerationConfig(max_tokens=40)))
    finished = events[-1]
    assert isinstance(finished, Finished), log.read_text()[-2000:]
    steps = [e for e in events if isinstance(e, Tokens)]
    assert finished.reasoning and "".join(e.reasoning for e in steps) == finished.reasoning
    assert "<think>" not in finished.text and "</think>" not in finished.text
    assert any(e.part == "reasoning" for e in steps)
    stats = finished.stats
    assert stats.drafted > 0 and math.isfinite(stats.tau)
    assert stats.tau == stats.generated_tokens / (stats.generated_tokens - stats.accepted)
