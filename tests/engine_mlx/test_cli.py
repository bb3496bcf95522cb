"""The CLI contract: ``generate --json`` events, errors with exit code 2, and bench output.
``main`` runs in this process: the same argument parsing, output and exit status as
``python -m engine_mlx`` (which the server's and the library's process tests start), without a
fresh interpreter importing the engine for each command."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess

import pytest

from engine_mlx.cli import main


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``main(ARGS)``, its exit status and output as a finished process would give them."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(["engine_mlx", *args], code, out.getvalue(), err.getvalue())


def test_generate_json_contract(tiny_model_dir, tiny_target):
    model = tiny_model_dir("qwen3")
    proc = _cli(
        "generate", "--model", str(model), "--prompt", "Hello", "--max-tokens", "6", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines()]
    assert events[0]["event"] == "started"
    assert {e["event"] for e in events[1:-1]} <= {"prefill_progress", "tokens"}
    last = events[-1]
    assert last["event"] == "finished"
    assert set(last["stats"]) >= {
        "decode_tps",
        "prefill_tps",
        "ttft_s",
        "tau",
        "acceptance_rate",
        "steps",
        "context_depth",
        "modes",
    }
    assert last["stats"]["modes"] == {"ar": last["stats"]["steps"]}
    streamed = [t for e in events if e["event"] == "tokens" for t in e["token_ids"]]
    assert last["tokens"] == streamed and 0 < len(streamed) <= 6
    # The same greedy tokens as the engine in-process, chat template applied by default.
    from engine_mlx.api import encode_prompt
    from engine_mlx.config import GenerationConfig
    from engine_mlx.session import Session

    target = tiny_target("qwen3")
    ids = encode_prompt(target, "Hello")
    assert last["stats"]["context_depth"] == len(ids) + len(streamed)
    expected = list(Session(target).generate(ids, GenerationConfig(max_tokens=6)))[-1]
    assert last["tokens"] == list(expected.tokens)


def test_generate_plain_text_and_prompt_file(tiny_model_dir, tmp_path):
    messages = tmp_path / "chat.json"
    messages.write_text(json.dumps([{"role": "user", "content": "Hi"}]))
    proc = _cli(
        "generate",
        "--model",
        str(tiny_model_dir("llama")),
        "--prompt-file",
        str(messages),
        "--max-tokens",
        "4",
        "--temp",
        "0.8",
        "--seed",
        "3",
    )
    assert proc.returncode == 0, proc.stderr
    assert "tok/s" in proc.stderr and "tau 1.00" in proc.stderr


@pytest.mark.parametrize(
    ("breakage", "message"),
    [
        ("config", "config.json is missing"),
        ("weights", "model.safetensors is truncated"),
        ("arch", "unknown architecture"),
    ],
)
def test_generate_bad_model_folder(tiny_model_dir, tmp_path, breakage, message):
    import shutil

    model = tmp_path / "broken"
    shutil.copytree(tiny_model_dir("llama"), model)
    if breakage == "config":
        (model / "config.json").unlink()
    elif breakage == "weights":
        w = model / "model.safetensors"
        w.write_bytes(w.read_bytes()[:1000])
    else:
        cfg = json.loads((model / "config.json").read_text())
        cfg["model_type"] = "nonesuch"
        (model / "config.json").write_text(json.dumps(cfg))
    proc = _cli("generate", "--model", str(model), "--prompt", "x")
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_generate_prompt_too_long(tiny_model_dir):
    proc = _cli(
        "generate", "--model", str(tiny_model_dir("llama")), "--raw", "--prompt", "fox " * 700
    )
    assert proc.returncode == 2
    assert "holds 512" in proc.stderr


def test_bench_writes_json(tiny_model_dir, tmp_path):
    model = tiny_model_dir("llama")
    drafter = tmp_path / "drafter"
    made = _cli("init-drafter", "--model", str(model), "--out", str(drafter), "--block", "4")
    assert made.returncode == 0, made.stderr
    out = tmp_path / "bench.json"
    proc = _cli(
        "bench",
        "--model",
        str(model),
        "--drafter",
        str(drafter),
        "--modes",
        "ar,dflash2",
        "--widths",
        "1,2",
        "--depths",
        "0,64",
        "--max-tokens",
        "8",
        "--repeats",
        "1",
        "--json-out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    # (a z-lab row joins when the optional `dflash` package is installed)
    results = [r for r in report["results"] if r["impl"] != "z-lab"]
    cells = {(r["impl"], r["mode"], r["width"], r["depth"]) for r in results}
    assert cells == {
        (impl, mode, w, d)
        for d in (0, 64)
        for impl, mode, w in [
            ("flashchat", "ar", 1),
            ("flashchat", "dflash2", 1),
            ("flashchat", "dflash2", 2),
            ("mlx-lm", "ar", 1),
        ]
    }
    assert all(r["tokens"] == 8 and r["decode_tps"] > 0 for r in results)
    ours = [r for r in results if r["impl"] == "flashchat"]
    assert all(r["identical_to_first"] for r in ours)  # greedy: every mode, the same tokens
    spec = [r for r in ours if r["mode"] == "dflash2"]
    assert all(r["verify_ms"] > 0 and r["draft_ms"] > 0 for r in spec)
    assert {r["depth"] for r in report["ratios"]} == {0, 64}
    assert set(report["verify_ms_by_tree_size"]["0"]) == {"1", "4", "7"}
    assert "vs mlx-lm" in proc.stdout


def test_generate_speculative_matches_plain(tiny_model_dir, tmp_path):
    model = tiny_model_dir("qwen3")
    drafter = tmp_path / "drafter"
    assert _cli("init-drafter", "--model", str(model), "--out", str(drafter)).returncode == 0
    outs = []
    for extra in ([], ["--drafter", str(drafter), "--mode", "dflash2", "--width", "3"]):
        proc = _cli(
            "generate",
            "--model",
            str(model),
            "--prompt",
            "Hi",
            "--max-tokens",
            "12",
            "--json",
            *extra,
        )
        assert proc.returncode == 0, proc.stderr
        outs.append(json.loads(proc.stdout.splitlines()[-1]))
    assert outs[0]["tokens"] == outs[1]["tokens"]
    assert outs[1]["stats"]["modes"].get("dflash2", 0) >= 1
    assert outs[1]["stats"]["drafted"] > 0


def test_generate_rejects_a_drafter_for_another_target(tiny_model_dir, tmp_path):
    drafter = tmp_path / "drafter"
    made = _cli("init-drafter", "--model", str(tiny_model_dir("llama")), "--out", str(drafter))
    assert made.returncode == 0
    cfg = json.loads((drafter / "config.json").read_text())
    cfg["vocab_size"] = 151936
    (drafter / "config.json").write_text(json.dumps(cfg))
    proc = _cli(
        "generate",
        "--model",
        str(tiny_model_dir("llama")),
        "--drafter",
        str(drafter),
        "--mode",
        "dflash2",
        "--prompt",
        "x",
    )
    assert proc.returncode == 2
    assert "vocabulary 151936" in proc.stderr
