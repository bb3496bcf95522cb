"""``scripts/setup.sh`` on each system it supports, run for real with its installing steps
printed instead of run (``FLASHCHAT_SETUP_DRY_RUN=1``) and the system's commands faked on
PATH: a Mac runs no apt, no MKL and no C build and says so; an Intel Mac, a Mac without
Xcode's tools, or no Python 3.11 get a message a person can act on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _fake(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def _run(tmp_path: Path, system: str, machine: str, *, xcode: bool = True, python: bool = True):
    """setup.sh with ``uname`` answering ``system``/``machine``; every call to apt-get, dpkg
    or xcode-select is logged."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    _fake(bin_dir, "uname", f'[ "$1" = -m ] && echo {machine} || echo {system}')
    for tool in ("apt-get", "dpkg"):
        _fake(bin_dir, tool, f'echo "{tool} $*" >> {log}; exit 1')
    _fake(bin_dir, "xcode-select", f'echo "xcode-select $*" >> {log}; exit {0 if xcode else 2}')
    python_bin = sys.executable if python else "/nonexistent/python3"
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "FLASHCHAT_SETUP_DRY_RUN": "1",
        "PYTHON": python_bin,
    }
    result = subprocess.run(
        ["bash", str(ROOT / "scripts" / "setup.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    calls = log.read_text() if log.exists() else ""
    return result, calls


def test_on_an_apple_silicon_mac_it_runs_no_apt_no_mkl_and_no_c_build(tmp_path):
    result, calls = _run(tmp_path, "Darwin", "arm64")
    assert result.returncode == 0, result.stderr
    assert "apt-get" not in calls and "dpkg" not in calls
    assert "xcode-select -p" in calls  # the command-line tools are checked
    out = result.stdout
    assert "skipping the system packages (no apt), MKL and the C builds" in out
    assert "mkl>=2024" not in out  # no MKL install step
    assert "would run: .venv/bin/python -m pip install -q -e .[test]" in out
    assert "would run: .venv/bin/python -m engine_mlx demo --all" in out
    assert "Set-up complete." in out


def test_on_x86_64_linux_it_installs_mkl_and_checks_the_system_packages(tmp_path):
    result, calls = _run(tmp_path, "Linux", "x86_64")
    assert result.returncode == 0, result.stderr
    assert "dpkg -s libopenblas0-pthread" in calls  # each package checked (all "missing" here)
    assert "would run:" in result.stdout and "apt-get install" in result.stdout
    assert "mkl>=2024" in result.stdout


@pytest.mark.parametrize(
    ("system", "machine", "xcode", "python", "message"),
    [
        ("Darwin", "x86_64", True, True, "needs an Apple-Silicon Mac (arm64); this one is x86_64"),
        ("Darwin", "arm64", False, True, "xcode-select --install"),
        ("Darwin", "arm64", True, False, "needs Python 3.11 or newer"),
        ("FreeBSD", "amd64", True, True, "not on FreeBSD"),
    ],
)
def test_what_it_cannot_set_up_is_said_with_what_to_do(
    tmp_path, system, machine, xcode, python, message
):
    result, _ = _run(tmp_path, system, machine, xcode=xcode, python=python)
    assert result.returncode == 1
    assert message in result.stderr
    assert "would run" not in result.stdout  # nothing was installed first
