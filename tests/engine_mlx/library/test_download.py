"""Downloads from the local hub through the real huggingface_hub client: complete and
loadable, monotonic progress, cancel and resume without refetching, corrupt files caught,
dropped connections resumed, too little disk refused."""

from __future__ import annotations

import itertools
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from engine_mlx.library.catalog import list_installed
from engine_mlx.library.download import OperationCancelled, pull, staging_dir
from engine_mlx.library.hub import HubError, InsufficientResourcesError
from engine_mlx.library.integrity import IntegrityError
from engine_mlx.library.manifest import MANIFEST_NAME, read_manifest
from engine_mlx.library.pending import pending_downloads
from engine_mlx.library.progress import Progress
from engine_mlx.library.sources import HubSource

WEIGHTS = "model.safetensors"


def test_download_completes_verifies_and_loads(hub, publish, library, options) -> None:
    from engine_mlx.api import load_target
    from engine_mlx.config import GenerationConfig
    from engine_mlx.session import Session

    repo = publish("org/tiny", extra={"README.md": b"# Tiny"})
    events: list[Progress] = []
    path = pull(HubSource("org/tiny"), library, progress=events.append, options=options)
    assert path == library / "tiny"
    assert sorted(p.name for p in path.iterdir()) == sorted(
        [MANIFEST_NAME, "config.json", WEIGHTS, "tokenizer.json", "tokenizer_config.json"]
    )
    for name in ("config.json", WEIGHTS, "tokenizer.json"):
        assert (path / name).read_bytes() == repo.files[name]
    manifest = read_manifest(path)
    assert manifest["repo_id"] == "org/tiny" and manifest["commit"] == repo.commit
    assert {f["path"]: f["size"] for f in manifest["files"]}[WEIGHTS] == len(repo.files[WEIGHTS])
    assert not any((library / ".partial").glob("org--tiny@*"))  # staging renamed away
    target = load_target(path)
    final = list(Session(target).generate([1, 2, 3], GenerationConfig(max_tokens=3)))[-1]
    assert len(final.tokens) >= 1
    # Progress: byte counts never go back, per file and in total, and end complete.
    assert events[-1].phase == "installed" and events[-1].done == events[-1].total
    total = sum(len(repo.files[f["path"]]) for f in manifest["files"])
    assert all(e.total == total for e in events)
    assert all(b.done >= a.done for a, b in itertools.pairwise(events))
    for a, b in itertools.pairwise(events):
        if a.file == b.file:
            assert b.file_done >= a.file_done
    assert any(0 < e.file_done < e.file_size for e in events if e.file == WEIGHTS)
    # Pulling again finds it installed: no file is fetched.
    mark = hub.mark()
    assert pull(HubSource("org/tiny"), library, options=options) == path
    assert hub.file_requests(WEIGHTS, since=mark) == []


def test_cancel_then_resume_fetches_each_byte_once(hub, publish, library, options) -> None:
    repo = publish("org/tiny")
    size = len(repo.files[WEIGHTS])
    cancel = threading.Event()

    def cancel_midway(p: Progress) -> None:
        if p.file == WEIGHTS and p.file_done >= size // 3:
            cancel.set()

    with pytest.raises(OperationCancelled, match=r"cancelled; .* kept"):
        pull(HubSource("org/tiny"), library, progress=cancel_midway, cancel=cancel, options=options)
    assert list_installed(library) == []
    staging = staging_dir(library, "org/tiny", repo.commit)
    kept = (staging / (WEIGHTS + ".incomplete")).stat().st_size
    assert size // 3 <= kept < size
    (pending,) = pending_downloads(library)
    assert pending.repo_id == "org/tiny" and pending.bytes_on_disk >= kept

    # Resume in a fresh call, as after a restart: only the missing bytes are requested.
    mark = hub.mark()
    path = pull(HubSource("org/tiny"), library, options=options)
    assert (path / WEIGHTS).read_bytes() == repo.files[WEIGHTS]
    assert hub.file_requests(WEIGHTS, since=mark) == [f"bytes={kept}-"]
    assert hub.served(WEIGHTS, since=mark) == size - kept
    assert hub.file_requests("config.json", since=mark) == [None]  # the inspection's read only
    assert pending_downloads(library) == []


def test_corrupt_file_is_caught_and_nothing_is_listed(hub, publish, library, options) -> None:
    repo = publish("org/tiny")
    hub.corrupt.add(WEIGHTS)
    with pytest.raises(IntegrityError, match=r"model\.safetensors of org/tiny is corrupt: its sha"):
        pull(HubSource("org/tiny"), library, options=options)
    assert list_installed(library) == []
    assert not (library / "tiny").exists()
    staging = staging_dir(library, "org/tiny", repo.commit)
    assert not (staging / WEIGHTS).exists() and not (staging / f"{WEIGHTS}.incomplete").exists()
    assert (staging / "config.json").is_file()  # verified files are kept for the retry
    hub.corrupt.clear()
    mark = hub.mark()
    path = pull(HubSource("org/tiny"), library, options=options)
    assert (path / WEIGHTS).read_bytes() == repo.files[WEIGHTS]
    assert hub.file_requests(WEIGHTS, since=mark) == [None]  # fetched anew, from the start
    assert [m.name for m in list_installed(library)] == ["tiny"]


def test_dropped_connection_is_resumed(hub, publish, library, options) -> None:
    repo = publish("org/tiny")
    size = len(repo.files[WEIGHTS])
    hub.drop_after[WEIGHTS] = 100_000
    path = pull(HubSource("org/tiny"), library, options=options)
    assert (path / WEIGHTS).read_bytes() == repo.files[WEIGHTS]
    assert hub.file_requests(WEIGHTS) == [None, "bytes=100000-"]
    assert hub.served(WEIGHTS) == size  # no byte sent twice


def test_hub_gone_mid_file_gives_up_with_the_bytes_kept(hub, publish, library, options) -> None:
    repo = publish("org/tiny")
    hub.drop_after[WEIGHTS] = 50_000
    stopped = []

    def stop_hub_at_the_drop(p: Progress) -> None:
        if p.file == WEIGHTS and p.file_done >= 50_000 and not stopped:
            stopped.append(hub.stop())  # every reconnect is now refused

    with pytest.raises(HubError, match=r"model.safetensors of org/tiny failed 2 times in a row"):
        pull(
            HubSource("org/tiny"),
            library,
            progress=stop_hub_at_the_drop,
            options=replace(options, retries=1),
        )
    staging = staging_dir(library, "org/tiny", repo.commit)
    assert (staging / f"{WEIGHTS}.incomplete").stat().st_size == 50_000
    assert list_installed(library) == []


def test_too_little_disk_is_refused_before_downloading(hub, publish, library, options) -> None:
    publish("org/tiny")
    library.mkdir(parents=True)
    # A terabyte over what is free: other tests deleting files meanwhile free a few MB, and
    # with the reserve at exactly the free space the pull then went ahead (seen under -n 2).
    reserve = shutil.disk_usage(library).free + 2**40
    with pytest.raises(InsufficientResourcesError, match="Not enough disk space for org/tiny"):
        pull(HubSource("org/tiny"), library, options=replace(options, reserve_bytes=reserve))
    assert hub.file_requests(WEIGHTS) == [] and list_installed(library) == []


def test_new_commit_replaces_the_installed_one(hub, publish, library, options) -> None:
    old = publish("org/tiny")
    pull(HubSource("org/tiny"), library, options=options)
    files = dict(old.files)
    files["generation_config.json"] = b'{"temperature": 0.6}'
    new = publish("org/tiny", extra={"generation_config.json": b'{"temperature": 0.6}'})
    assert new.commit != old.commit
    path = pull(HubSource("org/tiny"), library, options=options)
    assert read_manifest(path)["commit"] == new.commit
    assert (path / "generation_config.json").is_file()
    assert [m.name for m in list_installed(library)] == ["tiny"]


def test_name_clash_with_another_model_uses_org_prefix(
    hub, publish, library, options, tiny_model_dir
) -> None:
    publish("org/tiny")
    shutil.copytree(tiny_model_dir("llama"), library / "tiny")  # someone else's "tiny"
    path = pull(HubSource("org/tiny"), library, options=options)
    assert path == library / "org--tiny"
    assert sorted(m.name for m in list_installed(library)) == ["org--tiny", "tiny"]


def test_the_same_repo_cannot_download_twice_at_once(hub, publish, library, options) -> None:
    from filelock import FileLock

    publish("org/tiny")
    (library / ".partial").mkdir(parents=True)
    with (
        FileLock(str(library / ".partial" / "org--tiny.lock")),
        pytest.raises(Exception, match="already being downloaded"),
    ):
        pull(HubSource("org/tiny"), library, options=options)


def test_progress_reports_speed_and_time_left(hub, publish, library, options) -> None:
    publish("org/tiny")
    events: list[Progress] = []
    pull(HubSource("org/tiny"), library, progress=events.append, options=options)
    moving = [e for e in events if e.phase == "downloading" and e.speed_bps > 0]
    assert moving, "no event carried a speed"
    assert all(e.eta_s is not None and e.eta_s >= 0 for e in moving)
    assert Path(library / "tiny").is_dir()
