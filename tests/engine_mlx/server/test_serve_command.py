"""Where ``serve`` takes its API key from: a key file or FLASHCHAT_API_KEY (neither shows in
``ps``), or ``--api-key`` with a warning that it does; a bad key file is one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_mlx.cli import build_parser, main
from engine_mlx.errors import EngineError
from engine_mlx.server.command import KEY_ENV, api_key


def serve_args(*options: str):
    return build_parser().parse_args(["serve", *options])


def test_the_key_comes_from_a_file_or_the_environment(tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv(KEY_ENV, "from-env")
    assert api_key(serve_args()) == "from-env"
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    assert api_key(serve_args("--api-key-file", str(key_file))) == "from-file"
    assert capsys.readouterr().err == ""
    assert api_key(serve_args("--api-key", "typed")) == "typed"
    warning = capsys.readouterr().err
    assert warning.startswith("warning:") and "(ps)" in warning and KEY_ENV in warning
    monkeypatch.delenv(KEY_ENV)
    assert api_key(serve_args()) is None


@pytest.mark.parametrize("content", ["", "\n", "two words\n"])
def test_a_key_file_without_one_key_is_refused(tmp_path: Path, content: str) -> None:
    key_file = tmp_path / "key"
    key_file.write_text(content)
    with pytest.raises(EngineError, match="one line, alone"):
        api_key(serve_args("--api-key-file", str(key_file)))
    with pytest.raises(EngineError, match="cannot read the API key file"):
        api_key(serve_args("--api-key-file", str(tmp_path / "missing")))


def test_a_network_bind_with_an_unreadable_key_file_exits_2(tmp_path: Path, capsys) -> None:
    missing = str(tmp_path / "missing")
    assert main(["serve", "--host", "0.0.0.0", "--api-key-file", missing]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read the API key file") and len(err.splitlines()) == 1
