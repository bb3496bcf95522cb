"""Bad input from a hub, a mirror or a hand-placed folder: refused with a message, nothing
installed that will not load, nothing written outside the library."""

from __future__ import annotations

import json
import shutil
import struct
from dataclasses import replace
from pathlib import Path

import pytest

from engine_mlx.errors import EngineError
from engine_mlx.library.catalog import list_installed
from engine_mlx.library.download import pull
from engine_mlx.library.hub import (
    HubError,
    InsufficientResourcesError,
    UnsupportedRepoError,
)
from engine_mlx.library.memory import estimate_memory
from engine_mlx.library.pending import pending_downloads
from engine_mlx.library.sources import HubSource
from tests.support.hub_server import HubRepo


def files_under(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*")} if folder.exists() else set()


def broken_config(folder: Path, **fields: object) -> bytes:
    config = json.loads((folder / "config.json").read_text())
    config.update(fields)
    return json.dumps(config).encode()


def safetensors_with_header(header: object, data: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + data


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"hidden_size": "abc"}, "'hidden_size' must be a whole number"),
        ({"num_attention_heads": "x"}, "'num_attention_heads' must be a whole number"),
        ({"model_type": "qwen3.evil"}, "'model_type' must be an architecture name"),
        ({"vocab_size": 2**40}, "'vocab_size' must be a whole number"),
    ],
)
def test_malformed_config_is_refused_before_download(
    hub, publish, library, options, tiny_model_dir, fields, message
) -> None:
    """Regression (#2, #5): such a repo pulled fine, then broke `list` and the app."""
    publish("org/bad", extra={"config.json": broken_config(tiny_model_dir("qwen3"), **fields)})
    with pytest.raises(UnsupportedRepoError, match=message):
        pull(HubSource("org/bad"), library, options=options)
    assert hub.file_requests("model.safetensors") == []
    assert list_installed(library) == [] and pending_downloads(library) == []


def test_repo_whose_weights_do_not_load_is_not_installed(hub, publish, library, options) -> None:
    """Regression (#2): a safetensors header of `[]` was installed, then broke `list`."""
    publish("org/bad", extra={"model.safetensors": safetensors_with_header([])})
    with pytest.raises(UnsupportedRepoError, match=r"org/bad was downloaded but cannot be used"):
        pull(HubSource("org/bad"), library, options=options)
    assert list_installed(library) == [] and pending_downloads(library) == []
    assert not any((library / ".partial").glob("org--bad@*"))


@pytest.mark.parametrize(
    "config",
    [
        {"hidden_size": "abc"},
        {"model_type": "a.b"},
        {"text_config": [1, 2]},
        {"vocab_size": 2**40},
    ],
)
def test_hand_placed_malformed_model_is_listed_with_its_problem(
    library, tiny_model_dir, config
) -> None:
    """Regression (#2): one such folder made `list` raise and stopped the app at start."""
    good = shutil.copytree(tiny_model_dir("qwen3"), library / "good")
    bad = shutil.copytree(tiny_model_dir("qwen3"), library / "bad")
    (bad / "config.json").write_bytes(broken_config(good, **config))
    models = {m.name: m for m in list_installed(library)}
    assert models["good"].problem == ""
    assert "bad/config.json" in models["bad"].problem
    assert "remove it from the library" in models["bad"].problem


def test_hand_placed_model_with_bad_weights_header_is_listed(library, tiny_model_dir) -> None:
    bad = shutil.copytree(tiny_model_dir("qwen3"), library / "bad")
    (bad / "model.safetensors").write_bytes(
        safetensors_with_header({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})
    )
    (model,) = list_installed(library)
    assert "bad/model.safetensors is corrupt" in model.problem and "holds 4 bytes" in model.problem


def test_commit_id_that_climbs_out_is_refused(hub, publish, library, options) -> None:
    """Regression (#3): a mirror answering this commit made `pull` write into the parent of
    the data folder."""
    publish("org/tiny")
    evil = "/../../../..0000000000000000000000000000"
    hub.reported_commit = evil  # listed, and files served at it, as the mirror did
    before = files_under(library.parent)
    with pytest.raises(HubError, match="without a valid commit id"):
        pull(HubSource("org/tiny"), library, options=options)
    assert files_under(library.parent) - before <= {library, library / ".partial"}


@pytest.mark.parametrize("name", ["../escape.safetensors", "..\\escape.safetensors", "/abs.json"])
def test_listed_file_names_that_leave_the_folder_are_never_fetched(
    hub, publish, library, options, name
) -> None:
    publish("org/tiny")

    def add_entry(tree: list) -> list:
        entry = {"type": "file", "oid": "1" * 40, "size": 3, "path": name}
        return [*tree, entry]

    hub.rewrite["tree"] = add_entry
    path = pull(HubSource("org/tiny"), library, options=options)
    assert path == library / "tiny"
    assert hub.file_requests(name) == []
    assert not (library.parent / "escape.safetensors").exists()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"size": -5}, "invalid size or hash"),
        ({"size": "big"}, "invalid size or hash"),
        ({"oid": "not-a-hash"}, "invalid size or hash"),
    ],
)
def test_listing_with_bad_sizes_or_hashes_is_refused(
    hub, publish, library, options, entry, message
) -> None:
    publish("org/tiny")

    def spoil(tree: list) -> list:
        return [{**e, **entry} if e.get("path") == "config.json" else e for e in tree]

    hub.rewrite["tree"] = spoil
    with pytest.raises(HubError, match=message):
        pull(HubSource("org/tiny"), library, options=options)
    assert list_installed(library) == []


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (404, r"No model org/tiny on 127\.0\.0\.1"),
        (401, "private or gated"),
        (429, "rate-limiting"),
        (503, "server error"),
    ],
)
def test_hub_statuses_say_what_to_do(hub, publish, library, options, status, message) -> None:
    """Regression (#6): a missing repo was reported as 'refused (404) … try again later'."""
    publish("org/tiny")
    hub.status["info"] = status
    with pytest.raises(HubError, match=message):
        pull(HubSource("org/tiny"), library, options=replace(options, retries=0))


def test_disk_refusal_leaves_no_unfinished_entry(hub, publish, library, options) -> None:
    """Regression (#6): a refused download left a '0 B' unfinished entry behind."""
    publish("org/tiny")
    library.mkdir(parents=True)
    free = shutil.disk_usage(library).free
    with pytest.raises(InsufficientResourcesError):
        pull(HubSource("org/tiny"), library, options=replace(options, reserve_bytes=free))
    assert pending_downloads(library) == []


def test_memory_estimate_counts_the_vocabulary() -> None:
    """Regression (#6): the pre-check ignored the vocabulary's logits."""
    config = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4}
    small = estimate_memory({**config, "vocab_size": 1000}, 10**6)
    large = estimate_memory({**config, "vocab_size": 1_000_000}, 10**6)
    assert large - small >= 999_000 * 4 * 64


def test_state_file_naming_another_place_is_not_resumed(library) -> None:
    """A download's saved state is data on disk: a tampered one is ignored, never used to
    build a path."""
    staging = library / ".partial" / "org--tiny@0123456789ab"
    staging.mkdir(parents=True)
    state = {"repo_id": "../../etc", "commit": "/../../x", "total": 5}
    (staging / "flashchat_download.json").write_text(json.dumps(state))
    assert pending_downloads(library) == []


def test_repo_ids_that_are_not_names_are_refused(hub, library, options) -> None:
    hub.add(HubRepo("org/tiny", {"config.json": b"{}"}))
    with pytest.raises(EngineError, match="not a valid model name"):
        pull(HubSource("../tiny"), library, options=options)
    assert not library.exists() or list(library.iterdir()) == []
