"""External DFlash baselines: the JSON-lines protocol with a stand-in runner (always), the real
runners in their own venvs when ``scripts/setup_bench_envs.sh`` made them (skipped otherwise:
CI does not), and the reasons given for what does not run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from engine_mlx.bench.external import (
    BASELINES,
    RUNNERS_DIR,
    SETUP_HINT,
    RunnerProcess,
    _as_runner,
    _not_started_reason,
    default_envs_dir,
    export_v1,
    external_baselines,
)
from engine_mlx.bench.measure import run_ours
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.errors import EngineError
from engine_mlx.session import Session
from tests.support.drafters import random_dflash

# A runner with no MLX: echoes the prompt's last id + 1, 2, ... in steps of two tokens, or
# refuses the target when --target is "refuse".
FAKE_RUNNER = f"""
import sys
sys.path.insert(0, {str(RUNNERS_DIR)!r})
from _protocol import Loaded, Unsupported, serve

def load(args):
    if args.target == "refuse":
        raise Unsupported("model_type toy is not one of ours") from NotImplementedError("toy")
    print("library chatter that must not reach the protocol")
    def generate(prompt, max_tokens, steps):
        out = []
        while len(out) < max_tokens + 1:  # one too many, as a block-wise loop may give
            steps.add(2)
            out += [prompt[-1] + len(out) + 1, prompt[-1] + len(out) + 2]
        return out
    return Loaded(generate, {{"note": "fake"}})

raise SystemExit(serve(load, "pytest"))
"""


def _fake(tmp_path: Path, target: str = "t") -> RunnerProcess:
    script = tmp_path / "run_fake.py"
    script.write_text(FAKE_RUNNER)
    argv = [sys.executable, str(script), "--target", target, "--drafter", "d", "--block", "4"]
    return RunnerProcess(argv)


def test_protocol_round_trip_with_a_stand_in_runner(tmp_path):
    process = _fake(tmp_path)
    hello = process.receive(60)
    assert hello["ready"] and hello["info"]["note"] == "fake"
    assert hello["info"]["package"].startswith("pytest ")
    run = _as_runner(process, "fake")
    reply = run([5, 6, 7], 5)
    assert reply["output"] == [8, 9, 10, 11, 12]  # cut to max_tokens
    assert reply["tokens"] == 5 and reply["tau"] == pytest.approx(5 / 3)
    assert reply["decode_tps"] > 0 and reply["ttft_s"] >= 0
    assert run([1], 2)["output"] == [2, 3]  # the same process answers again
    process.close()
    with pytest.raises(EngineError, match="gone"):
        run([1], 2)


def test_refusal_is_reported_as_unsupported(tmp_path):
    process = _fake(tmp_path, target="refuse")
    hello = process.receive(60)
    process.close()
    assert hello["unsupported"] and hello["stage"] == "load"
    reason = _not_started_reason(hello, "toy")
    assert reason.startswith("does not support this target (model_type toy)")
    assert "NotImplementedError: toy" in reason


def test_missing_envs_say_how_to_make_them(tiny_model_dir, tiny_target, tmp_path):
    target = tiny_target("llama")
    drafter = random_dflash(target, block=4)
    runners, reasons = external_baselines(
        tiny_model_dir("llama"), drafter, 0, 4, tmp_path / "no-envs", "float32"
    )
    assert runners == {}
    assert set(reasons) == {b.name for b in BASELINES}
    assert all(SETUP_HINT in r and "no environment" in r for r in reasons.values())


def test_v1_export_carries_the_session_mask_and_block(tiny_target, tmp_path):
    drafter = random_dflash(tiny_target("llama"), conv=2, block=6)
    folder = export_v1(drafter, mask_id=7, block=4, folder=tmp_path / "v1")
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["block_size"] == 4 and cfg["dflash_config"]["mask_token_id"] == 7
    assert "local_conv_kernel" not in cfg["dflash_config"]


@pytest.fixture(scope="module")
def real_runners(tiny_model_dir, tiny_target):
    """Every implementation whose venv exists, started once on the tiny llama target."""
    envs = default_envs_dir()
    present = tuple(b.name for b in BASELINES if (envs / b.env / "bin" / "python").exists())
    if not present:
        pytest.skip(f"no external baseline venvs in {envs} ({SETUP_HINT})")
    target = tiny_target("llama")
    drafter = random_dflash(target, block=4)
    runners, reasons = external_baselines(
        tiny_model_dir("llama"), drafter, 0, 4, envs, target.dtype, only=present
    )
    session = Session(target, DFlashDrafter(drafter, target), None, "none")
    return session, runners, reasons


@pytest.mark.parametrize("name", [b.name for b in BASELINES])
def test_real_runner_matches_plain_greedy_or_says_why(real_runners, name):
    session, runners, reasons = real_runners
    if name not in runners and name not in reasons:
        pytest.skip(f"no venv for {name} ({SETUP_HINT})")
    if name in reasons:  # e.g. dflash-mlx: Qwen and Gemma targets only
        assert "does not support this target (model_type llama)" in reasons[name], reasons[name]
        return
    prompt = session.target.tokenizer.encode("The quick brown fox")
    plain = run_ours(session, prompt, GenerationConfig(max_tokens=9))["output"]
    reply = runners[name](prompt, 9)
    assert reply["output"] == plain
    assert reply["tokens"] == 9 and reply["tau"] >= 1.0 and reply["decode_tps"] > 0
