"""Resumable, verified downloads of hub repositories into the library.

Layout under the library folder (``paths.models_dir()``)::

    .partial/ORG--NAME@COMMIT/           staging: finished files, FILE.incomplete in flight,
    .partial/ORG--NAME@COMMIT/flashchat_download.json   the plan and which files are verified
    .partial/ORG--NAME.lock              one downloader per repository (app or CLI)
    NAME/                                installed: the staging folder, renamed once complete
    NAME/flashchat_model.json            its manifest, written last before the rename

Each file is fetched from the revision pinned to a commit, appended to ``FILE.incomplete``,
resumed from that file's length with an HTTP Range request after a dropped connection, a
cancel, a crash or a restart, then checked (size, and the sha256 or git hash the hub lists)
and renamed to its name. Only when every file is verified is the manifest written and the
folder renamed into place, so the library never lists a half-installed model.

Why this loop rather than ``hf_hub_download``: huggingface_hub 1.x downloads into a
process-unique temporary file that it deletes on any failure (no resume after a cancel, a
crash or a restart); it reads in 10 MiB chunks (progress in jumps, a cancel waits for the
next chunk on a slow link); and it checks sizes, not hashes. The parts that know the hub come
from huggingface_hub all the same: ``HfApi`` lists the files, ``get_hf_file_metadata`` does
the HEAD (commit, ETag, size, CDN location), ``hf_hub_url``, ``build_hf_headers`` (token,
user agent), ``http_stream_backoff`` (retries on 429/5xx) and ``hf_raise_for_status`` (hub
errors) do the rest. Xet-stored files download through the same ``/resolve`` URLs over
plain HTTP.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from engine_mlx.errors import EngineError, ModelLoadError
from engine_mlx.library.classify import classify_folder
from engine_mlx.library.hub import (
    HubError,
    InsufficientResourcesError,
    RemoteFile,
    RepoPlan,
    UnsupportedRepoError,
    hub_endpoint,
    hub_errors,
    inspect_repo,
)
from engine_mlx.library.integrity import IntegrityError, verify_file
from engine_mlx.library.manifest import (
    MANIFEST_NAME,
    STATE_NAME,
    partial_root,
    read_json,
    read_manifest,
    write_json_atomic,
    write_manifest,
)
from engine_mlx.library.progress import (
    OperationCancelled,
    ProgressCallback,
    ProgressReporter,
    check_cancel,
)
from engine_mlx.library.safe_paths import UnsafePathError, inside, is_commit, is_safe_relative
from engine_mlx.library.sources import HubSource, is_valid_repo_id
from engine_mlx.library.units import human_bytes
from engine_mlx.paths import models_dir

INCOMPLETE = ".incomplete"
DEFAULT_RESERVE = 512 * 1000**2


@dataclass(frozen=True)
class DownloadOptions:
    """How to download. ``reserve_bytes``: disk space left free after the download (refuse
    when it would not be); ``retries``: attempts per file without any new byte before
    giving up; ``retry_wait_s``: pause before reconnecting."""

    endpoint: str | None = None
    token: str | bool | None = None
    reserve_bytes: int = DEFAULT_RESERVE
    retries: int = 5
    retry_wait_s: float = 1.0
    timeout_s: float = 30.0
    progress_interval_s: float = 0.1


def repo_key(repo_id: str) -> str:
    return repo_id.replace("/", "--")


def staging_dir(root: Path, repo_id: str, commit: str) -> Path:
    """Where a download of ``repo_id`` at ``commit`` is put together; both names are checked
    (they come from the hub, or from a saved state file) before they become a path."""
    if not is_valid_repo_id(repo_id):
        raise UnsafePathError(f"{repo_id[:100]!r} is not a valid model name; nothing written.")
    if not is_commit(commit):
        raise HubError(f"{str(commit)[:60]!r} is not a commit id; nothing was downloaded.")
    return inside(partial_root(root), f"{repo_key(repo_id)}@{commit[:12]}")


def find_installed(root: Path, repo_id: str) -> Path | None:
    """The library folder holding ``repo_id`` (any commit), if installed."""
    if not root.is_dir():
        return None
    for folder in sorted(root.iterdir()):
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        manifest = read_manifest(folder)
        if manifest and manifest.get("repo_id") == repo_id:
            return folder
    return None


def install_name(root: Path, repo_id: str) -> str:
    """``NAME``, or ``ORG--NAME`` when a different model already uses ``NAME``."""
    installed = find_installed(root, repo_id)
    if installed is not None:
        return installed.name
    name = repo_id.split("/", 1)[1]
    if not (root / name).exists():
        return name
    key = repo_key(repo_id)
    if not (root / key).exists():
        return key
    raise EngineError(
        f"The library already has folders named {name} and {key} holding other models: remove "
        f"one of them to install {repo_id}."
    )


def pull(
    source: HubSource,
    root: Path | None = None,
    *,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    options: DownloadOptions | None = None,
    memory_limit: int | None = None,
    on_plan=None,
) -> Path:
    """Inspect ``source``, then download and install it; return the installed folder.

    ``on_plan(plan)`` is called once the repository is checked, before any byte of it is
    downloaded (the app shows the size and memory estimate)."""
    options = options or DownloadOptions()
    endpoint = options.endpoint or hub_endpoint()
    plan = inspect_repo(source, endpoint=endpoint, token=options.token, memory_limit=memory_limit)
    if on_plan is not None:
        on_plan(plan)
    return download(plan, root, progress=progress, cancel=cancel, options=options)


def download(
    plan: RepoPlan,
    root: Path | None = None,
    *,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    options: DownloadOptions | None = None,
) -> Path:
    """Fetch every file of ``plan``, verify it, install the folder; return its path.

    Returns at once when this commit is already installed. Raises OperationCancelled,
    InsufficientResourcesError (disk), IntegrityError (a corrupt file: it is deleted, the
    others are kept), HubError."""
    from filelock import FileLock, Timeout

    options = options or DownloadOptions()
    root = Path(root) if root is not None else models_dir()
    staging_dir(root, plan.repo_id, plan.commit)  # refuses names that are not safe first
    installed = find_installed(root, plan.repo_id)
    if installed is not None and (read_manifest(installed) or {}).get("commit") == plan.commit:
        return installed
    partial_root(root).mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(partial_root(root) / f"{repo_key(plan.repo_id)}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise EngineError(
            f"{plan.repo_id} is already being downloaded (by another FlashChat window or a "
            "`pull` command); wait for it to finish."
        ) from None
    try:
        return _Download(plan, root, progress, cancel, options).run()
    finally:
        lock.release()


class _Download:
    def __init__(
        self,
        plan: RepoPlan,
        root: Path,
        progress: ProgressCallback | None,
        cancel: threading.Event | None,
        options: DownloadOptions,
    ) -> None:
        self.plan, self.root, self.cancel, self.options = plan, root, cancel, options
        self.endpoint = options.endpoint or plan.endpoint
        self.staging = staging_dir(root, plan.repo_id, plan.commit)
        self.reporter = ProgressReporter(
            plan.name,
            plan.download_bytes,
            len(plan.files),
            progress,
            options.progress_interval_s,
        )

    # ------------------------------------------------------------------ the whole download
    def run(self) -> Path:
        self._discard_other_commits()
        self._check_disk()  # before the staging folder exists: a refusal leaves nothing
        self.staging.mkdir(parents=True, exist_ok=True)
        state = self._load_state()
        for remote in self.plan.files:
            check_cancel(self.cancel, self._cancel_message())
            if remote.path in state["verified"] and self._final(remote).is_file():
                self.reporter.skip_file(remote.path, remote.size)
                continue
            self._fetch(remote)
            state["verified"].append(remote.path)
            write_json_atomic(self.staging / STATE_NAME, state)
            self.reporter.file_finished()
        return self._install()

    def _cancel_message(self) -> str:
        kept = human_bytes(self.reporter.done)
        return (
            f"Download of {self.plan.repo_id} cancelled; {kept} kept, so downloading it again "
            "resumes where it stopped."
        )

    def _discard_other_commits(self) -> None:
        """A partial download of an older commit of the same repo cannot be finished any
        more (files differ): it only holds disk space."""
        prefix = repo_key(self.plan.repo_id) + "@"
        for other in partial_root(self.root).glob(prefix + "*"):
            if other != self.staging and other.is_dir():
                shutil.rmtree(other, ignore_errors=True)

    def _load_state(self) -> dict:
        path = self.staging / STATE_NAME
        state = read_json(path)
        if state is None or state.get("commit") != self.plan.commit:
            state = {
                "repo_id": self.plan.repo_id,
                "revision": self.plan.revision,
                "commit": self.plan.commit,
                "endpoint": self.endpoint,
                "kind": self.plan.kind,
                "total": self.plan.download_bytes,
                "files": [f.__dict__ for f in self.plan.files],
                "verified": [],
            }
            write_json_atomic(path, state)
        return state

    def _on_disk(self, remote: RemoteFile) -> int:
        final, partial = self._final(remote), self._partial(remote)
        if final.is_file():
            return final.stat().st_size
        return partial.stat().st_size if partial.is_file() else 0

    def _check_disk(self) -> None:
        needed = sum(max(f.size - self._on_disk(f), 0) for f in self.plan.files)
        free = shutil.disk_usage(partial_root(self.root)).free
        if free - needed < self.options.reserve_bytes:
            raise InsufficientResourcesError(
                f"Not enough disk space for {self.plan.repo_id}: {human_bytes(needed)} still to "
                f"download, {human_bytes(free)} free in {self.root} (FlashChat keeps "
                f"{human_bytes(self.options.reserve_bytes)} spare). Free some space or choose "
                "a smaller model, then download again."
            )

    def _final(self, remote: RemoteFile) -> Path:
        if not is_safe_relative(remote.path):
            raise UnsafePathError(f"Refused the file name {remote.path[:100]!r} from the hub.")
        return inside(self.staging, *remote.path.split("/"))

    def _partial(self, remote: RemoteFile) -> Path:
        final = self._final(remote)
        return final.with_name(final.name + INCOMPLETE)

    # ------------------------------------------------------------------ one file
    def _fetch(self, remote: RemoteFile) -> None:
        final, partial = self._final(remote), self._partial(remote)
        final.parent.mkdir(parents=True, exist_ok=True)
        if final.is_file():  # renamed but not recorded: a crash in between
            final.replace(partial)
        have = partial.stat().st_size if partial.is_file() else 0
        if have > remote.size:
            partial.unlink()
            have = 0
        if have == 0 and remote.path in self.plan.prefetched:
            partial.write_bytes(self.plan.prefetched[remote.path])  # verified below
            have = partial.stat().st_size
        self.reporter.start_file(remote.path, remote.size, have, "downloading")
        if have < remote.size:
            self._transfer(remote, partial, have)
        self.reporter.emit(force=True, phase="verifying")
        try:
            verify_file(
                partial,
                label=f"{remote.path} of {self.plan.repo_id}",
                size=remote.size,
                sha256=remote.sha256,
                git_oid=remote.git_oid,
                cancel=self.cancel,
            )
        except IntegrityError as exc:
            partial.unlink(missing_ok=True)
            raise IntegrityError(
                f"{exc} The damaged file was deleted and nothing was installed; download "
                f"{self.plan.repo_id} again to fetch it anew."
            ) from exc
        partial.replace(final)

    def _transfer(self, remote: RemoteFile, partial: Path, have: int) -> None:
        """Append the rest of ``remote`` to ``partial``, reconnecting with a Range request
        after a dropped connection, until it has every byte."""
        import httpx
        from huggingface_hub.errors import HfHubHTTPError
        from huggingface_hub.utils import (
            build_hf_headers,
            hf_raise_for_status,
            http_stream_backoff,
        )

        repo_id = self.plan.repo_id
        url, location = self._locate(remote)
        failures, refreshed = 0, False
        with partial.open("ab") as fh, hub_errors(repo_id, self.endpoint, self.plan.commit):
            while have < remote.size:
                check_cancel(self.cancel, self._cancel_message())
                headers = build_hf_headers(token=self.options.token, library_name="flashchat")
                headers["Accept-Encoding"] = "identity"
                if urlsplit(location).netloc != urlsplit(url).netloc:
                    headers.pop("authorization", None)  # a signed CDN link: no token off-hub
                if have:
                    headers["Range"] = f"bytes={have}-"
                before = have
                try:
                    # Network errors are retried here (resuming from the bytes on disk);
                    # huggingface_hub's backoff retries 429 and 5xx answers.
                    with http_stream_backoff(
                        "GET",
                        location,
                        headers=headers,
                        timeout=self.options.timeout_s,
                        retry_on_exceptions=(),
                    ) as response:
                        hf_raise_for_status(response)
                        if have and response.status_code != 206:  # Range ignored: start over
                            fh.seek(0)
                            fh.truncate()
                            self.reporter.restart_file()
                            have = before = 0
                        have = self._stream(response, fh, have, remote)
                except HfHubHTTPError as exc:
                    status = exc.response.status_code if exc.response is not None else 0
                    if status in (401, 403, 410) and location != url and not refreshed:
                        url, location = self._locate(remote)  # the signed CDN link expired
                        refreshed = True
                        continue
                    raise
                except httpx.TransportError as exc:
                    have = fh.seek(0, os.SEEK_END)  # every byte that arrived is on disk
                    failures = 0 if have > before else failures + 1
                    if failures > self.options.retries:
                        raise HubError(
                            f"Downloading {remote.path} of {repo_id} failed {failures} times "
                            f"in a row ({type(exc).__name__}: {exc}). "
                            f"{human_bytes(self.reporter.done)} are kept: download again to "
                            "resume."
                        ) from exc
                    if self.cancel is not None:
                        self.cancel.wait(self.options.retry_wait_s)
                    else:
                        time.sleep(self.options.retry_wait_s)

    def _locate(self, remote: RemoteFile) -> tuple[str, str]:
        """(hub URL, where to GET it): the HEAD answer, checked against the listing."""
        from huggingface_hub import get_hf_file_metadata, hf_hub_url

        repo_id, commit = self.plan.repo_id, self.plan.commit
        url = hf_hub_url(repo_id, remote.path, revision=commit, endpoint=self.endpoint)
        with hub_errors(repo_id, self.endpoint, commit):
            meta = get_hf_file_metadata(url, token=self.options.token, endpoint=self.endpoint)
        if meta.size is not None and meta.size != remote.size:
            raise HubError(
                f"{self.endpoint} lists {remote.path} of {repo_id} as {remote.size:,} bytes but "
                f"serves {meta.size:,}; try again later."
            )
        if meta.commit_hash and meta.commit_hash != commit:
            raise HubError(
                f"{self.endpoint} served {remote.path} of {repo_id} from commit "
                f"{meta.commit_hash[:12]}, not the pinned {commit[:12]}; try again."
            )
        return url, meta.location or url

    def _stream(self, response, fh, have: int, remote: RemoteFile) -> int:
        """Write the body as it arrives (each piece on disk before the next is read, so a
        dropped connection loses nothing that arrived), checking for a cancel between."""
        for piece in response.iter_bytes():
            if not piece:
                continue
            if have + len(piece) > remote.size:
                raise IntegrityError(
                    f"{remote.path} of {self.plan.repo_id}: the server sent more than the "
                    f"{remote.size:,} bytes the hub lists; download again."
                )
            try:
                fh.write(piece)
                fh.flush()
            except OSError as exc:
                raise InsufficientResourcesError(
                    f"Cannot write {remote.path} into {self.staging}: {exc}. Free some disk "
                    "space, then download again to resume."
                ) from exc
            have += len(piece)
            self.reporter.advance(len(piece))
            check_cancel(self.cancel, self._cancel_message())
        return have

    # ------------------------------------------------------------------ install
    def _install(self) -> Path:
        self.reporter.emit(force=True, phase="installing")
        plan = self.plan
        self._check_usable()
        name = install_name(self.root, plan.repo_id)
        write_manifest(
            self.staging,
            {
                "kind": plan.kind,
                "source": "hub",
                "repo_id": plan.repo_id,
                "revision": plan.revision,
                "commit": plan.commit,
                "endpoint": self.endpoint,
                "architecture": plan.architecture,
                "files": [
                    {"path": f.path, "size": f.size, "sha256": f.sha256, "git_oid": f.git_oid}
                    for f in plan.files
                ],
                "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            },
        )
        (self.staging / STATE_NAME).unlink(missing_ok=True)
        target = inside(self.root, name)
        replace_folder(self.staging, target)
        self.reporter.emit(force=True, phase="installed")
        return target

    def _check_usable(self) -> None:
        """Every file is the publisher's, but is the whole a model that loads? A broken
        repository is refused here, so the library never lists what it cannot run."""
        try:
            kind, _files = classify_folder(self.staging)
            if kind != self.plan.kind:
                raise ModelLoadError(f"it holds a {kind}, not the {self.plan.kind} it listed")
        except ModelLoadError as exc:
            shutil.rmtree(self.staging, ignore_errors=True)
            raise UnsupportedRepoError(
                f"{self.plan.repo_id} was downloaded but cannot be used ({exc}). It was not "
                "installed and its files were deleted; the repository itself is broken."
            ) from exc


def replace_folder(new: Path, target: Path) -> None:
    """Move ``new`` to ``target``; an older ``target`` (an earlier commit) is moved aside
    first and deleted after, so a crash never leaves neither."""
    trash = None
    if target.exists():
        trash = partial_root(target.parent) / f".trash-{target.name}-{uuid.uuid4().hex[:8]}"
        target.rename(trash)
    new.rename(target)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


__all__ = [
    "MANIFEST_NAME",
    "DownloadOptions",
    "OperationCancelled",
    "download",
    "pull",
]
