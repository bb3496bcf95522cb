"""llama.cpp's plain decoding as the suite's peer: found from the model's markers, timed by
the llama-bench that set-up builds, and a reason in words when it cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine_mlx.bench import llama_peer
from tests.conftest import require_asset

LLAMA_BENCH = llama_peer.llama_bench(Path(__file__).resolve().parents[3] / ".bench-envs")


def test_the_gguf_is_found_through_the_import_and_quantize_markers(tmp_path, monkeypatch):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    (downloads / "model.gguf").write_bytes(b"GGUF")
    monkeypatch.setattr(llama_peer, "downloads_dir", lambda: downloads)
    imported, quantized, plain = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (imported, quantized, plain):
        folder.mkdir()
    (imported / llama_peer.IMPORT_MARKER).write_text(json.dumps({"source_name": "model.gguf"}))
    (quantized / llama_peer.QUANTIZE_MARKER).write_text(
        json.dumps({"source": "a", "source_name": "model.gguf", "bits": 4})
    )
    assert llama_peer.source_gguf(imported) == downloads / "model.gguf"
    assert llama_peer.source_gguf(quantized) == downloads / "model.gguf"
    assert llama_peer.source_gguf(plain) is None
    (downloads / "model.gguf").unlink()
    assert llama_peer.source_gguf(imported) is None


def test_what_keeps_it_from_running_is_said(tmp_path):
    assert "--llama-gguf" in llama_peer.plain_decoding(None, tmp_path, [0], 8)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert "setup_bench_envs.sh" in llama_peer.plain_decoding(gguf, tmp_path, [0], 8)


@pytest.mark.slow
def test_llama_bench_times_the_demo_gguf(qwen_gguf):
    binary = require_asset(LLAMA_BENCH, "llama-bench (scripts/build_llama_cpp.sh)")
    result = llama_peer.plain_decoding(qwen_gguf, binary.parents[2], [0, 64], 4)
    assert isinstance(result, llama_peer.PeerResult), result
    assert set(result.tok_s) == {0, 64} and all(v > 0 for v in result.tok_s.values())
    assert result.as_dict()["gguf"] == qwen_gguf.name
