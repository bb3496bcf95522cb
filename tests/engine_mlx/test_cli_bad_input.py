"""Bad input on the command line ends in one line on stderr and exit code 2 (130 for Ctrl+C),
never a traceback; prompt files and chat messages are fuzzed."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import signal
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_mlx.cli import main
from tests.support.library_fixtures import hf_weights, tiny_gguf, tiny_vocab  # noqa: F401

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant", "system", "tool", "", 3]) | JSON},
        optional={"content": st.text(max_size=20) | JSON},
    )
    | JSON,
    max_size=3,
)


def run(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0]


def generate(model: Path, *args: str) -> tuple[int, str, str]:
    return run("generate", "--model", str(model), "--max-tokens", "2", *args)


@pytest.fixture
def model(tiny_model_dir: Callable[[str], Path]) -> Path:
    return tiny_model_dir("qwen3")


def test_prompt_file_that_is_not_utf8(model: Path, tmp_path: Path) -> None:
    prompt = tmp_path / "p.txt"
    prompt.write_bytes(b"caf\xe9 au lait")
    assert_one_line_error(*generate(model, "--prompt-file", str(prompt))[::2], "not UTF-8")


def test_prompt_file_with_a_json_object(model: Path, tmp_path: Path) -> None:
    prompt = tmp_path / "p.json"
    prompt.write_text('{"role": "user", "content": "hi"}')
    assert_one_line_error(*generate(model, "--prompt-file", str(prompt))[::2], "JSON object")


@pytest.mark.parametrize(
    ("messages", "needle"),
    [(["hi"], "needs a 'role'"), ([{"role": "robot", "content": "x"}], "'robot'")],
)
def test_bad_messages_with_system(model: Path, tmp_path: Path, messages, needle) -> None:
    prompt = tmp_path / "m.json"
    prompt.write_text(json.dumps(messages))
    code, _, err = generate(model, "--prompt-file", str(prompt), "--system", "Be brief.")
    assert_one_line_error(code, err, needle)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"vocab_size": 2**40}, "'vocab_size'"),
        ({"model_type": "qwen3.evil"}, "'model_type'"),
    ],
)
def test_config_values_that_used_to_crash(model: Path, tmp_path: Path, change, needle) -> None:
    folder = shutil.copytree(model, tmp_path / "m")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **change}))
    assert_one_line_error(*generate(folder, "--prompt", "hi")[::2], needle)


@pytest.mark.parametrize("seed", ["-1", str(2**64)])
def test_seeds_out_of_range_are_one_line(model: Path, seed: str) -> None:
    """Issue #65: these ended in mx.random.key's TypeError."""
    assert_one_line_error(*generate(model, "--prompt", "hi", "--seed", seed)[::2], "2^64 - 1")


def test_safetensors_header_of_the_wrong_shape(model: Path, tmp_path: Path) -> None:
    folder = shutil.copytree(model, tmp_path / "m")
    raw = json.dumps({"w": {"dtype": "F32", "shape": 4}}).encode()
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw)
    assert_one_line_error(*generate(folder, "--prompt", "hi")[::2], "model.safetensors")


def test_import_gguf_never_replaces_a_model_folder(
    model: Path,
    tmp_path: Path,
    tiny_gguf,  # noqa: F811
) -> None:
    """Regression (#1): this exited 0 and the folder's own weights were gone."""
    folder = shutil.copytree(model, tmp_path / "someones_model")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    code, _, err = run("import-gguf", str(tiny_gguf), str(folder))
    assert_one_line_error(code, err, "did not write")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_ctrl_c_while_the_model_loads(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(_path: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("engine_mlx.api.load_target", interrupted)
    code, _, err = generate(model, "--prompt", "hi")
    assert code == 130 and "Cancelled" in err and "Traceback" not in err


def test_ctrl_c_while_generating_exits_130(model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Regression (#6): generate exited 0 on Ctrl+C while pull exits 130."""
    from engine_mlx.session import Session

    original = Session.generate

    def interrupt_after_first_event(self, *args: Any, **kwargs: Any):
        for n, event in enumerate(original(self, *args, **kwargs)):
            if n == 1:
                signal.raise_signal(signal.SIGINT)  # what Ctrl+C sends
            yield event

    monkeypatch.setattr(Session, "generate", interrupt_after_first_event)
    code, _, err = run("generate", "--model", str(model), "--prompt", "hi", "--max-tokens", "50")
    assert code == 130, err
    assert "[cancelled]" in err


FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(content=st.binary(max_size=60) | JSON.map(lambda v: json.dumps(v).encode()))
@pytest.mark.slow
def test_fuzzed_prompt_files(model: Path, content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        prompt = Path(tmp) / "prompt"
        prompt.write_bytes(content)
        code, _, err = generate(model, "--prompt-file", str(prompt))
    if code != 0:
        assert_one_line_error(code, err)


@FUZZ
@given(messages=MESSAGES, system=st.none() | st.text(max_size=10))
@pytest.mark.slow
def test_fuzzed_chat_messages(model: Path, messages: Any, system: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        prompt = Path(tmp) / "messages.json"
        prompt.write_text(json.dumps(messages))
        extra = [f"--system={system}"] if system else []  # "=": a value may start with "-"
        code, _, err = generate(model, "--prompt-file", str(prompt), *extra)
    if code != 0:
        assert_one_line_error(code, err)
