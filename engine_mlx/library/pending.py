"""Downloads that stopped before the end (cancel, error, crash, restart): found from their
state files under the library's ``.partial`` folder, resumed by pulling the same commit, or
discarded."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from engine_mlx.errors import EngineError
from engine_mlx.library.manifest import PARTIAL_DIR, STATE_NAME, partial_root, read_json
from engine_mlx.library.safe_paths import is_commit
from engine_mlx.library.sources import is_valid_repo_id
from engine_mlx.paths import models_dir


@dataclass(frozen=True)
class PendingDownload:
    """A download that stopped before the end (cancel, error, crash, restart)."""

    repo_id: str
    revision: str | None
    commit: str
    path: Path
    bytes_on_disk: int
    total: int

    @property
    def name(self) -> str:
        return self.repo_id.split("/", 1)[1]


def pending_downloads(root: Path | None = None) -> list[PendingDownload]:
    """Downloads that stopped before the end, with how much of them is on disk."""
    root = Path(root) if root is not None else models_dir()
    out = []
    base = partial_root(root)
    if not base.is_dir():
        return out
    for folder in sorted(base.iterdir()):
        state = read_json(folder / STATE_NAME) if folder.is_dir() else None
        repo_id, commit = (state or {}).get("repo_id"), (state or {}).get("commit")
        if not isinstance(repo_id, str) or not is_valid_repo_id(repo_id) or not is_commit(commit):
            continue  # not a state file this version wrote: never resumed from
        try:
            on_disk = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            on_disk -= (folder / STATE_NAME).stat().st_size
        except OSError:
            continue
        out.append(
            PendingDownload(
                repo_id=repo_id,
                revision=revision if isinstance(revision := state.get("revision"), str) else None,
                commit=commit,
                path=folder,
                bytes_on_disk=max(on_disk, 0),
                total=total if isinstance(total := state.get("total"), int) else 0,
            )
        )
    return out


def discard_pending(pending: PendingDownload) -> None:
    """Delete a stopped download's files."""
    if pending.path.parent.name != PARTIAL_DIR:
        raise EngineError(f"{pending.path} is not a partial download.")
    shutil.rmtree(pending.path, ignore_errors=True)
