"""What a drop, a paste or a command-line argument names, before anything is fetched or read.

A person drops or pastes whatever they have at hand: a Hugging Face link copied from the
browser (``https://huggingface.co/ORG/NAME``, maybe ``/tree/REVISION``), the ``ORG/NAME``
they read somewhere, a model folder, a ``.gguf`` file, MTP ``.safetensors`` files. This
module only classifies; anything it cannot place becomes a ``SourceError`` that says what
was expected, so the window can show it rather than guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from engine_mlx.errors import EngineError

HUB_HOSTS = ("huggingface.co", "www.huggingface.co", "hf.co")
# The hub's rules for a name part: letters, digits, '-', '_', '.'; no leading '-'/'.'; no
# '--' or '..'; at most 96 characters.
_NAME = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?"
REPO_ID = re.compile(rf"^({_NAME})/({_NAME})$")
NON_MODEL_PREFIXES = (
    "datasets",
    "spaces",
    "collections",
    "docs",
    "papers",
    "blog",
    "organizations",
)


class SourceError(EngineError):
    """The dropped or pasted thing is not something the library can install."""


@dataclass(frozen=True)
class HubSource:
    """A model repository on the hub, at a branch, tag or commit (None: the default branch)."""

    repo_id: str
    revision: str | None = None

    def describe(self) -> str:
        return self.repo_id + (f" @ {self.revision}" if self.revision else "")


@dataclass(frozen=True)
class LocalFolder:
    """A model, drafter or MTP folder on this machine."""

    path: Path

    def describe(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class GGUFSource:
    """A llama.cpp ``.gguf`` file, imported into a model folder."""

    path: Path

    def describe(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class SafetensorsFiles:
    """Loose ``.safetensors`` files: an MTP head (``mtp.*`` tensors)."""

    paths: tuple[Path, ...]

    def describe(self) -> str:
        return ", ".join(p.name for p in self.paths)


Source = HubSource | LocalFolder | GGUFSource | SafetensorsFiles


def is_valid_repo_id(text: str) -> bool:
    return bool(REPO_ID.match(text)) and "--" not in text and ".." not in text


def parse_hub_url(url: str, extra_hosts: Iterable[str] = ()) -> HubSource:
    """``https://huggingface.co/ORG/NAME[/tree/REVISION]`` (or ``hf.co``, or the configured
    endpoint's host in ``extra_hosts``) -> HubSource."""
    text = url.strip()
    if "://" not in text:
        text = "https://" + text
    parts = urlsplit(text)
    host = (parts.hostname or "").lower()
    netloc = parts.netloc.lower()
    if host not in HUB_HOSTS and netloc not in extra_hosts and host not in extra_hosts:
        raise SourceError(f"{url} is not a Hugging Face link (expected https://huggingface.co/…).")
    segments = [unquote(s) for s in parts.path.split("/") if s]
    if segments and segments[0] in NON_MODEL_PREFIXES:
        kind = segments[0].rstrip("s")
        raise SourceError(f"{url} is a {kind} page, not a model: drop a model's link instead.")
    if len(segments) < 2:
        raise SourceError(
            f"{url} names no model: a model link looks like https://huggingface.co/ORG/NAME."
        )
    repo_id = f"{segments[0]}/{segments[1]}"
    if not is_valid_repo_id(repo_id):
        raise SourceError(f"{repo_id!r} (from {url}) is not a valid model name.")
    rest = segments[2:]
    if not rest:
        return HubSource(repo_id)
    if rest[0] == "tree" and len(rest) >= 2:
        # Branch names may contain '/', as may folders after them; the hub's own links
        # encode a slash in a branch as %2F, so the first segment is the revision.
        if len(rest) > 2:
            raise SourceError(
                f"{url} points into a sub-folder of {repo_id}: drop the model's own link "
                f"(https://huggingface.co/{repo_id}) instead."
            )
        return HubSource(repo_id, rest[1])
    if rest[0] in ("blob", "resolve") and len(rest) >= 3:
        raise SourceError(
            f"{url} is a link to one file of {repo_id}. FlashChat downloads whole models: drop "
            f"https://huggingface.co/{repo_id} instead (or download the file and drop it)."
        )
    raise SourceError(f"{url}: not a model link FlashChat understands (…/ORG/NAME[/tree/REV]).")


def parse_text(text: str, extra_hosts: Iterable[str] = ()) -> Source:
    """Pasted or dropped text: a hub link, ``ORG/NAME``, or a path on this machine."""
    line = text.strip().strip("\"'<>").strip()
    if not line:
        raise SourceError("Nothing to add: drop or paste a model link, ORG/NAME, or a file.")
    if "\n" in line:
        line = line.splitlines()[0].strip()
    if line.startswith("file://"):
        return parse_paths([Path(unquote(urlsplit(line).path))])
    lowered = line.lower()
    if "://" in line or lowered.startswith(HUB_HOSTS) or lowered.startswith(tuple(extra_hosts)):
        return parse_hub_url(line, extra_hosts)
    if line.startswith(("/", "~", "./", "../")) or re.match(r"^[A-Za-z]:[\\/]", line):
        return parse_paths([Path(line).expanduser()])
    if is_valid_repo_id(line):
        return HubSource(line)
    raise SourceError(
        f"{line[:80]!r} is not a model FlashChat can add: use ORG/NAME (e.g. Qwen/Qwen3-4B), a "
        "https://huggingface.co/ link, a model folder, a .gguf file or .safetensors files."
    )


def parse_paths(paths: Sequence[Path]) -> Source:
    """Dropped files and folders: one folder, one ``.gguf``, or ``.safetensors`` files."""
    if not paths:
        raise SourceError("Nothing was dropped.")
    paths = [Path(p) for p in paths]
    missing = [p for p in paths if not p.exists()]
    if missing:
        raise SourceError(f"{missing[0]} does not exist.")
    folders = [p for p in paths if p.is_dir()]
    if folders:
        if len(paths) > 1:
            raise SourceError("Drop one model folder at a time.")
        return LocalFolder(folders[0])
    suffixes = {p.suffix.lower() for p in paths}
    if suffixes == {".gguf"}:
        if len(paths) > 1:
            raise SourceError("Drop one .gguf file at a time.")
        return GGUFSource(paths[0])
    if suffixes == {".safetensors"}:
        return SafetensorsFiles(tuple(sorted(paths)))
    names = ", ".join(p.name for p in paths[:3])
    raise SourceError(
        f"{names}: FlashChat adds model folders, .gguf files and .safetensors files (MTP "
        "heads); these are none of those."
    )


def parse_drop(
    paths: Sequence[Path], urls: Sequence[str] = (), text: str = "", extra_hosts: Iterable[str] = ()
) -> Source:
    """A drop or paste as Qt's mime data gives it: local files first, then web URLs, then
    text (a browser drags a link as both a URL and its text)."""
    if paths:
        return parse_paths(paths)
    for url in urls:
        if url.startswith("file:"):
            return parse_paths([Path(unquote(urlsplit(url).path))])
    if urls:
        return parse_text(urls[0], extra_hosts)
    return parse_text(text, extra_hosts)
