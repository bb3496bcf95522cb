"""Drops and pastes become the right source, or a message that says what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_mlx.library.sources import (
    GGUFSource,
    HubSource,
    LocalFolder,
    SafetensorsFiles,
    SourceError,
    parse_drop,
    parse_text,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://huggingface.co/Qwen/Qwen3-4B", HubSource("Qwen/Qwen3-4B")),
        ("https://huggingface.co/Qwen/Qwen3-4B/", HubSource("Qwen/Qwen3-4B")),
        ("huggingface.co/Qwen/Qwen3-4B", HubSource("Qwen/Qwen3-4B")),
        ("https://hf.co/z-lab/Qwen3-4B-DFlash-b16", HubSource("z-lab/Qwen3-4B-DFlash-b16")),
        (
            "https://huggingface.co/Qwen/Qwen3-4B/tree/refs%2Fpr%2F3",
            HubSource("Qwen/Qwen3-4B", "refs/pr/3"),
        ),
        ("https://huggingface.co/Qwen/Qwen3-4B/tree/v1.0", HubSource("Qwen/Qwen3-4B", "v1.0")),
        ("  Qwen/Qwen3-4B\n", HubSource("Qwen/Qwen3-4B")),
        ("mlx-community/Qwen3-4B-4bit", HubSource("mlx-community/Qwen3-4B-4bit")),
        ("<https://huggingface.co/a/b>", HubSource("a/b")),
    ],
)
def test_hub_links_and_names(text: str, expected: HubSource) -> None:
    assert parse_text(text) == expected


def test_the_configured_endpoint_host_counts_as_a_hub() -> None:
    src = parse_text("http://127.0.0.1:8123/org/model/tree/main", ["127.0.0.1:8123"])
    assert src == HubSource("org/model", "main")
    with pytest.raises(SourceError, match="not a Hugging Face link"):
        parse_text("http://127.0.0.1:8123/org/model")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("https://huggingface.co/datasets/org/data", "dataset page, not a model"),
        ("https://huggingface.co/Qwen", "names no model"),
        ("https://huggingface.co/Qwen/Qwen3-4B/blob/main/config.json", "one file of Qwen/Qwen3"),
        ("https://huggingface.co/Qwen/Qwen3-4B/tree/main/sub", "sub-folder"),
        ("https://example.com/Qwen/Qwen3-4B", "not a Hugging Face link"),
        ("what is the capital of France?", "not a model FlashChat can add"),
        ("a--b/c", "not a model FlashChat can add"),
        ("", "Nothing to add"),
    ],
)
def test_bad_text_says_what_is_expected(text: str, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        parse_text(text)


def test_paths(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    gguf = tmp_path / "m.Q4_0.gguf"
    gguf.write_bytes(b"GGUF")
    heads = [tmp_path / "b.safetensors", tmp_path / "a.safetensors"]
    for h in heads:
        h.write_bytes(b"x")
    assert parse_drop([folder]) == LocalFolder(folder)
    assert parse_drop([gguf]) == GGUFSource(gguf)
    assert parse_drop(heads) == SafetensorsFiles((heads[1], heads[0]))
    assert parse_text(str(folder)) == LocalFolder(folder)
    assert parse_drop([], [folder.as_uri()]) == LocalFolder(folder)
    assert parse_drop([], ["https://huggingface.co/a/b"], "ignored") == HubSource("a/b")
    assert parse_drop([], [], "a/b") == HubSource("a/b")
    readme = tmp_path / "notes.txt"
    readme.write_text("hi")
    with pytest.raises(SourceError, match="none of those"):
        parse_drop([readme])
    with pytest.raises(SourceError, match="does not exist"):
        parse_drop([tmp_path / "gone.gguf"])
    with pytest.raises(SourceError, match="one model folder at a time"):
        parse_drop([folder, gguf])
