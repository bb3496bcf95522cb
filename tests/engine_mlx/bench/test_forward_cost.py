"""``bench --forward-cost``: every (depth, tokens) cell timed, the cache put back each time."""

from __future__ import annotations

import json

import pytest

from engine_mlx.auto.forward_timing import depth_prompt
from engine_mlx.bench.forward_cost import TOKENS, forward_cost_rows
from engine_mlx.blas import small_gemm
from engine_mlx.cli import main


def test_json_report_has_every_cell(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "cost.json"
    argv = ["bench", "--forward-cost", "--model", str(tiny_model_dir("llama"))]
    assert main([*argv, "--depths", "0,40", "--repeats", "1", "--json-out", str(out)]) == 0
    report = json.loads(out.read_text())
    cells = [(r["depth"], r["tokens"]) for r in report["rows"]]
    assert cells == [(d, n) for d in (0, 40) for n in TOKENS]
    assert all(r["ms"] > 0 for r in report["rows"])
    assert [p["depth"] for p in report["prefill"]] == [40] and report["prefill"][0]["ms"] > 0
    assert report["model"] and report["blas"]
    printed = capsys.readouterr().out
    assert "forward ms by tokens" in printed
    if small_gemm() is not None:  # before and after, side by side
        assert all(r["blas_ms"] > 0 for r in report["rows"] + report["prefill"])
        assert printed.count("<- the BLAS alone") == 2 and "(the BLAS alone: " in printed


@pytest.mark.parametrize("arch", ["llama", "qwen3_5"])  # trimmed, and restored (hybrid)
def test_the_cache_is_put_back_after_every_forward(arch, tiny_target):
    target = tiny_target(arch)
    assert len(depth_prompt(target, 37)) == 37 and depth_prompt(target, 0) == []
    rows = forward_cost_rows(target, [37], [1, 3], repeats=2)  # asserts the depth itself
    assert [r["tokens"] for r in rows] == [1, 3]


def test_a_depth_beyond_the_context_is_refused(tiny_model_dir):
    argv = ["bench", "--forward-cost", "--model", str(tiny_model_dir("llama"))]
    assert main([*argv, "--depths", "1000000"]) == 2
