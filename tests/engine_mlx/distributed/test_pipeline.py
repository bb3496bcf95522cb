"""A target split across processes by ``mlx.launch`` (ring backend, loopback) replies as one
process does: every mode and width, greedy and seeded sampling, and the next turn over the
kept prefill; tiny llama, qwen3 and hybrid qwen3_5 targets over 2 and 3 ranks."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine_mlx.distributed import replies_driver

ROOT = Path(__file__).resolve().parents[3]
LAUNCH = Path(sys.executable).with_name("mlx.launch")


def launch_command(ranks: int, args: list[str]) -> list[str]:
    """``mlx.launch -n ranks`` on loopback with the ring backend, on ports no other test
    holds, running ``args`` (after the interpreter) in every rank."""
    if not LAUNCH.exists():
        pytest.skip("mlx.launch is not installed beside this interpreter")
    return [str(LAUNCH), "-n", str(ranks), "--backend", "ring", "--python", sys.executable,
            "--starting-port", str(free_ports(ranks)), "--", *args]  # fmt: skip


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive free ports (the ring listens on one per rank)."""
    for _ in range(50):
        base = random.randrange(20000, 60000)
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    held.enter_context(socket.socket()).bind(("127.0.0.1", port))
            except OSError:
                continue
        return base
    raise RuntimeError("no free ports")


def launch(ranks: int, args: list[str], env: dict[str, str], timeout: float = 240):
    """Run it to the end; whatever happens, no rank outlives it (its own process group)."""
    proc = subprocess.Popen(
        launch_command(ranks, args), cwd=ROOT, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture(scope="module")
def companions_for(tiny_target, tmp_path_factory):
    """A random DFlash2 drafter and MTP head for a tiny target, written once per arch."""
    from engine_mlx.models.dflash import save_dflash
    from engine_mlx.models.mtp import save_mtp
    from tests.support.drafters import random_dflash, random_mtp_head

    made: dict[str, tuple[Path, Path]] = {}

    def get(arch: str) -> tuple[Path, Path]:
        if arch not in made:
            target, root = tiny_target(arch), tmp_path_factory.mktemp(f"pipeline_{arch}")
            drafter = save_dflash(random_dflash(target, reference=True), root / "dflash2")
            made[arch] = (drafter, save_mtp(random_mtp_head(target), root / "mtp.safetensors"))
        return made[arch]

    return get


def pipeline_env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ, FLASHCHAT_AUTO_MEMORY="0", PYTHONPATH=str(ROOT))
    # A message may take minutes when the suite's heaviest tests share the two cores (the
    # demo's run once waited 60 s beside the bundle build); a rank that dies is still seen at
    # once (its connection closes), and ``launch`` bounds the whole run.
    env["FLASHCHAT_PIPELINE_TIMEOUT"] = "300"
    env["FLASHCHAT_STEP_COSTS"] = str(tmp_path / "step-costs")
    return env


@pytest.mark.parametrize("arch,ranks", [("llama", 2), ("qwen3", 3), ("qwen3_5", 3)])
def test_a_split_target_replies_as_one_process(
    arch, ranks, tiny_model_dir, companions_for, tmp_path, monkeypatch
):
    model = tiny_model_dir(arch)
    drafter, mtp = companions_for(arch)
    env = pipeline_env(tmp_path)
    for key in ("FLASHCHAT_AUTO_MEMORY", "FLASHCHAT_STEP_COSTS"):
        monkeypatch.setenv(key, env[key])
    alone = replies_driver.run_cases(replies_driver.session_for(model, drafter, mtp))
    tables = sorted((tmp_path / "step-costs").iterdir())
    out = tmp_path / "replies.json"
    driver = ["-m", "tests.engine_mlx.distributed.replies_driver"]
    done = launch(ranks, [*driver, str(model), str(drafter), str(mtp), str(out)], env)
    assert done.returncode == 0 and out.exists(), done.stderr[-3000:]
    split = json.loads(out.read_text())
    assert split == alone
    # auto measured the pipeline's own step costs, and kept them for this launch only
    assert sorted((tmp_path / "step-costs").iterdir()) == tables
    assert all(isinstance(tokens, list) and len(tokens) >= 12 for tokens in split.values())
    layers = [line for line in done.stderr.splitlines() if line.startswith("rank ")]
    assert len(layers) == ranks - 1, done.stderr[-3000:]  # each stage named its layers


@pytest.mark.slow  # the real demo, twice
def test_the_demo_over_two_ranks_replies_as_one_process(qwen_4bit_dir, tmp_path, monkeypatch):
    """The 4-bit Qwen demo with its shipped drafter and MTP head, greedy, in every fixed
    mode (auto, which calibrates its step costs through the pipeline at every launch, and the
    sampled cases run on the tiny targets above)."""
    model, names = qwen_4bit_dir, ["ar", "dflash2-w3", "mtp", "lookup"]
    env = pipeline_env(tmp_path)
    for key in ("FLASHCHAT_AUTO_MEMORY", "FLASHCHAT_STEP_COSTS"):
        monkeypatch.setenv(key, env[key])
    alone = replies_driver.run_cases(replies_driver.session_for(model, None, None), names)
    out = tmp_path / "replies.json"
    driver = ["-m", "tests.engine_mlx.distributed.replies_driver"]
    args = [*driver, str(model), "-", "-", str(out), ",".join(names)]
    done = launch(2, args, env, timeout=900)
    assert done.returncode == 0 and out.exists(), done.stderr[-3000:]
    assert json.loads(out.read_text()) == alone
