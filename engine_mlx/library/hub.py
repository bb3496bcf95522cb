"""Inspect a hub repository before downloading it: which files, is it runnable, how big.

A download of many gigabytes that ends in "unsupported architecture" or "out of memory" is
the worst outcome, so everything that can be known from the listing and ``config.json`` (a
few kB) is checked first: the repo is a model the engine runs (config, safetensors weights,
tokenizer), or a DFlash drafter, or an MTP head file; only the files the engine reads are
selected (no PyTorch ``.bin`` duplicates, no READMEs, no images); the download size and the
memory the model needs to run are estimated and compared with this machine.

The listing uses huggingface_hub's ``HfApi`` (``model_info`` pins the revision to a commit,
``list_repo_tree`` gives sizes and LFS sha256 per file). The endpoint is passed explicitly,
from ``hub_endpoint()`` unless given: huggingface_hub reads ``HF_ENDPOINT`` only once, at
import, and the library must follow the setting at call time.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

from engine_mlx.errors import EngineError, ModelLoadError
from engine_mlx.library.memory import (
    ESTIMATE_CONTEXT,
    RUNTIME_OVERHEAD,
    estimate_memory,
    unified_memory,
    usable_memory,
)
from engine_mlx.library.safe_paths import is_commit, is_safe_relative
from engine_mlx.library.sources import HubSource, SourceError, is_valid_repo_id
from engine_mlx.library.units import human_bytes
from engine_mlx.models.loading import (
    TOKENIZER_FILES,
    check_architecture,
    target_sizes,
    text_config,
)
from engine_mlx.models.metadata import check_config

DEFAULT_ENDPOINT = "https://huggingface.co"
_SHA256 = re.compile(r"^[0-9a-fA-F]{64}$")
_GIT_OID = re.compile(r"^[0-9a-fA-F]{40}$")
DRAFTER_ARCHITECTURES = ("DFlashDraftModel", "DFlash2DraftModel")  # v1 / llama.cpp's DFlash2


def is_drafter_config(config: dict) -> bool:
    """A DFlash drafter's config.json (v1, or llama.cpp's DFlash2), not a model's."""
    return any(a in DRAFTER_ARCHITECTURES for a in config.get("architectures") or [])


TARGET_EXTRA_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    *TOKENIZER_FILES,
)


class HubError(EngineError):
    """The hub could not be reached, or refused (not found, gated, rate limited...)."""


class UnsupportedRepoError(EngineError):
    """The repository is not something FlashChat can run (nothing was downloaded)."""


class InsufficientResourcesError(EngineError):
    """Not enough memory (or disk) for the model: says how much is needed and available."""


def hub_endpoint() -> str:
    """The hub to use: ``HF_ENDPOINT`` (a mirror, or a test server), read now, else the hub."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def endpoint_hosts(endpoint: str | None = None) -> tuple[str, ...]:
    """Hosts whose links name models, besides huggingface.co: the configured endpoint's."""
    parts = urlsplit(endpoint or hub_endpoint())
    return tuple(h for h in {parts.netloc.lower(), (parts.hostname or "").lower()} if h)


@dataclass(frozen=True)
class RemoteFile:
    """One file to fetch, with what the hub says it must be."""

    path: str
    size: int
    sha256: str | None = None  # LFS files: the sha256 of the content
    git_oid: str | None = None  # other files: the git blob id (sha1 of "blob N\\0" + content)


@dataclass(frozen=True)
class RepoPlan:
    """What downloading a repository would fetch and cost; nothing is on disk yet."""

    repo_id: str
    revision: str | None
    commit: str
    endpoint: str
    kind: str  # "target", "drafter" or "mtp"
    files: tuple[RemoteFile, ...]
    architecture: str
    max_context: int
    weight_bytes: int
    memory_bytes: int
    config: dict[str, Any] = field(default_factory=dict, compare=False)
    prefetched: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)
    """Small files already read while inspecting (config.json): the download reuses them
    once their hash checks out, instead of fetching them again."""

    @property
    def download_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def name(self) -> str:
        return self.repo_id.split("/", 1)[1]

    def summary(self) -> str:
        kind = {"target": "model", "drafter": "DFlash drafter", "mtp": "MTP head"}[self.kind]
        text = f"{self.repo_id} ({kind}, {self.architecture}): {human_bytes(self.download_bytes)}"
        text += f" in {len(self.files)} files"
        if self.kind == "target":
            text += f", needs about {human_bytes(self.memory_bytes)} of memory"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "repo_id": self.repo_id,
            "revision": self.revision,
            "commit": self.commit,
            "kind": self.kind,
            "architecture": self.architecture,
            "files": [f.path for f in self.files],
            "download_bytes": self.download_bytes,
            "memory_bytes": self.memory_bytes,
            "max_context": self.max_context,
        }


@contextmanager
def hub_errors(repo_id: str, endpoint: str, revision: str | None = None) -> Iterator[None]:
    """huggingface_hub's and httpx's exceptions -> a HubError a person can act on."""
    import httpx
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        OfflineModeIsEnabled,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    host = urlsplit(endpoint).netloc or endpoint
    try:
        yield
    except GatedRepoError as exc:
        raise HubError(
            f"{repo_id} is gated: accept its licence on {endpoint}/{repo_id} and log in with "
            "`hf auth login`, then try again."
        ) from exc
    except RepositoryNotFoundError as exc:
        raise HubError(
            f"No model {repo_id} on {host}: check the name (ORG/NAME, as in the model's link). "
            "A private model needs `hf auth login` first."
        ) from exc
    except RevisionNotFoundError as exc:
        raise HubError(f"{repo_id} has no branch, tag or commit {revision!r}.") from exc
    except RemoteEntryNotFoundError as exc:
        raise HubError(f"{repo_id}: a listed file is missing on {host}; try again.") from exc
    except OfflineModeIsEnabled as exc:
        raise HubError("HF_HUB_OFFLINE is set: unset it to download models.") from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        raise HubError(_status_message(status, repo_id, host)) from exc
    except httpx.HTTPError as exc:
        raise HubError(
            f"Cannot reach {host} ({type(exc).__name__}: {exc}). Check the network connection "
            "(or HF_ENDPOINT), then try again; finished files are kept."
        ) from exc


def _status_message(status: int, repo_id: str, host: str) -> str:
    """What an HTTP status the client did not classify means for the person downloading."""
    if status == 404:
        return f"No model {repo_id} on {host}: check the name (ORG/NAME, as in the model's link)."
    if status in (401, 403):
        return (
            f"{host} refused access to {repo_id} ({status}): it is private or gated; log in "
            "with `hf auth login` and accept its licence on its page, then try again."
        )
    if status == 429:
        return f"{host} is rate-limiting downloads (429): wait a few minutes, then try again."
    if status >= 500:
        return f"{host} had a server error ({status}) for {repo_id}: try again later."
    return f"{host} refused ({status or 'no status'}) for {repo_id}; try again later."


def _api(endpoint: str, token: str | bool | None):
    from huggingface_hub import HfApi

    return HfApi(endpoint=endpoint, token=token, library_name="flashchat")


def _read_remote_json(
    repo_id: str, filename: str, commit: str, endpoint: str, token
) -> tuple[dict, bytes]:
    """A small JSON file of the repo (config.json) and its bytes, read into memory."""
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    url = hf_hub_url(repo_id, filename, revision=commit, endpoint=endpoint)
    response = get_session().get(url, headers=build_hf_headers(token=token), timeout=30)
    hf_raise_for_status(response)
    try:
        data = json.loads(response.content)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise UnsupportedRepoError(f"{repo_id}/{filename} is not valid JSON: {exc}") from exc
    try:
        data = check_config(data, f"{repo_id}/{filename}")
    except ModelLoadError as exc:
        raise UnsupportedRepoError(f"{exc} Nothing was downloaded.") from exc
    return data, response.content


def list_files(
    repo_id: str,
    revision: str | None = None,
    *,
    endpoint: str | None = None,
    token: str | bool | None = None,
) -> tuple[str, list[RemoteFile]]:
    """(commit, files) of a repository at ``revision``, listed at that pinned commit."""
    endpoint = endpoint or hub_endpoint()
    api = _api(endpoint, token)
    host = urlsplit(endpoint).netloc or endpoint
    with hub_errors(repo_id, endpoint, revision):
        try:
            info = api.model_info(repo_id, revision=revision)
            commit = info.sha or (revision if is_commit(revision) else None)
            if not is_commit(commit):
                raise HubError(
                    f"{host} answered for {repo_id} without a valid commit id "
                    f"({str(commit)[:60]!r}); nothing was downloaded. Try again later."
                )
            tree = api.list_repo_tree(repo_id, revision=commit, recursive=True)
            files = [_remote_file(item, repo_id, host) for item in tree if _is_file(item)]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise HubError(
                f"{host} answered for {repo_id} with something that is not a hub listing "
                f"({type(exc).__name__}); nothing was downloaded. Check HF_ENDPOINT."
            ) from exc
    return commit, [f for f in files if f is not None]


def _is_file(item: object) -> bool:
    from huggingface_hub.hf_api import RepoFile

    return isinstance(item, RepoFile)


def _remote_file(item, repo_id: str, host: str) -> RemoteFile | None:
    """One listed file, its size and hash checked; None for a name that is not a safe
    relative path (never downloaded: it could point outside the library)."""
    if not is_safe_relative(item.path):
        return None
    size = item.size
    sha256 = item.lfs.sha256 if item.lfs else None
    git_oid = None if item.lfs else item.blob_id
    valid = (
        isinstance(size, int)
        and not isinstance(size, bool)
        and 0 <= size < 1 << 50
        and (sha256 is None or _SHA256.match(str(sha256)))
        and (git_oid is None or _GIT_OID.match(str(git_oid)))
        and (sha256 or git_oid)
    )
    if not valid:
        raise HubError(
            f"{host} listed {item.path[:80]} of {repo_id} with an invalid size or hash; "
            "nothing was downloaded. Try again later."
        )
    return RemoteFile(path=item.path, size=size, sha256=sha256, git_oid=git_oid)


def inspect_repo(
    source: HubSource,
    *,
    endpoint: str | None = None,
    token: str | bool | None = None,
    memory_limit: int | None = None,
) -> RepoPlan:
    """Check ``source`` is something the engine runs and fits this machine; plan its download.

    Raises UnsupportedRepoError (not runnable: says why and what to look for instead),
    InsufficientResourcesError (too big for ``memory_limit``, default this machine's RAM), or
    HubError."""
    endpoint = endpoint or hub_endpoint()
    repo_id = source.repo_id
    if not is_valid_repo_id(repo_id):
        raise SourceError(f"{repo_id[:100]!r} is not a valid model name (ORG/NAME).")
    commit, files = list_files(repo_id, source.revision, endpoint=endpoint, token=token)
    root = {f.path: f for f in files if "/" not in f.path}
    if "config.json" in root:
        with hub_errors(repo_id, endpoint, source.revision):
            config, raw = _read_remote_json(repo_id, "config.json", commit, endpoint, token)
        if is_drafter_config(config):
            plan = _drafter_plan(source, commit, endpoint, root, config)
        else:
            plan = _target_plan(source, commit, endpoint, root, config)
        plan = replace(plan, prefetched={"config.json": raw})
    else:
        plan = _mtp_plan(source, commit, endpoint, root, token)
    limit = usable_memory() if memory_limit is None else memory_limit
    if limit and plan.memory_bytes > limit:
        raise InsufficientResourcesError(
            f"{repo_id} needs about {human_bytes(plan.memory_bytes)} of memory to run "
            f"({human_bytes(plan.weight_bytes)} of weights plus the context cache of "
            f"{min(plan.max_context, ESTIMATE_CONTEXT):,} tokens); "
            f"{'the GPU of this Mac can use' if unified_memory() else 'this machine has'} "
            f"{human_bytes(limit)}. Choose a smaller or more quantized version (e.g. a 4-bit "
            "MLX conversion). Nothing was downloaded."
        )
    return plan


def _no_weights_message(repo_id: str, root: dict[str, RemoteFile]) -> str:
    names = list(root)
    if any(n.endswith(".gguf") for n in names):
        return (
            f"{repo_id} holds GGUF files, not a safetensors model: download the .gguf you "
            "want from its page and drop the file onto FlashChat to import it."
        )
    if any(n.endswith((".bin", ".pt", ".pth")) for n in names):
        return (
            f"{repo_id} has PyTorch .bin weights only; FlashChat reads safetensors. Look for a "
            "safetensors or MLX version of it (e.g. under mlx-community/)."
        )
    return f"{repo_id} has no model*.safetensors weights: it is not a model FlashChat can run."


def _target_plan(
    source: HubSource, commit: str, endpoint: str, root: dict[str, RemoteFile], config: dict
) -> RepoPlan:
    repo_id = source.repo_id
    model_type = config.get("model_type")
    if model_type is None:
        raise UnsupportedRepoError(f"{repo_id}: config.json has no model_type.")
    try:
        check_architecture(model_type, repo_id)
        target_sizes(config, f"{repo_id}/config.json")
    except ModelLoadError as exc:
        raise UnsupportedRepoError(f"{exc} Nothing was downloaded.") from exc
    weights = [f for n, f in root.items() if n.startswith("model") and n.endswith(".safetensors")]
    if not weights:
        raise UnsupportedRepoError(_no_weights_message(repo_id, root))
    if not any(name in root for name in TOKENIZER_FILES):
        raise UnsupportedRepoError(
            f"{repo_id} has no tokenizer ({', '.join(TOKENIZER_FILES)}): FlashChat cannot "
            "turn text into tokens for it. Look for a version that includes the tokenizer."
        )
    extras = [root[n] for n in TARGET_EXTRA_FILES if n in root]
    files = tuple(sorted({*weights, *extras}, key=lambda f: f.path))
    weight_bytes = sum(f.size for f in weights)
    tc = text_config(config)
    max_context = int(tc.get("max_position_embeddings") or 4096)
    return RepoPlan(
        repo_id=repo_id,
        revision=source.revision,
        commit=commit,
        endpoint=endpoint,
        kind="target",
        files=files,
        architecture=model_type,
        max_context=max_context,
        weight_bytes=weight_bytes,
        memory_bytes=estimate_memory(config, weight_bytes),
        config=config,
    )


def _drafter_plan(
    source: HubSource, commit: str, endpoint: str, root: dict[str, RemoteFile], config: dict
) -> RepoPlan:
    from engine_mlx.models.dflash import DFlashConfig

    repo_id = source.repo_id
    try:
        cfg = DFlashConfig.from_dict(config, f"{repo_id}/config.json")
    except ModelLoadError as exc:
        raise UnsupportedRepoError(f"{exc} Nothing was downloaded.") from exc
    weights = [f for n, f in root.items() if n.endswith(".safetensors")]
    if not weights:
        raise UnsupportedRepoError(f"{repo_id}: a DFlash drafter without .safetensors weights.")
    files = tuple(sorted([root["config.json"], *weights], key=lambda f: f.path))
    weight_bytes = sum(f.size for f in weights)
    return RepoPlan(
        repo_id=repo_id,
        revision=source.revision,
        commit=commit,
        endpoint=endpoint,
        kind="drafter",
        files=files,
        architecture=f"DFlash ({cfg.num_hidden_layers} layers, block {cfg.block_size})",
        max_context=cfg.max_position_embeddings,
        weight_bytes=weight_bytes,
        memory_bytes=weight_bytes + RUNTIME_OVERHEAD // 4,
        config=config,
    )


def _mtp_plan(
    source: HubSource, commit: str, endpoint: str, root: dict[str, RemoteFile], token
) -> RepoPlan:
    """A repo without config.json can only be an MTP head: ``.safetensors`` with ``mtp.*``
    tensors. Their headers are read with ranged requests (a few kB), not downloaded."""
    repo_id = source.repo_id
    candidates = [f for n, f in root.items() if n.endswith(".safetensors")]
    if not candidates:
        if any(n.endswith(".gguf") for n in root) or not root:
            raise UnsupportedRepoError(_no_weights_message(repo_id, root))
        raise UnsupportedRepoError(
            f"{repo_id} has no config.json and no weights: it is not a model repository."
        )
    from huggingface_hub.errors import SafetensorsParsingError

    api = _api(endpoint, token)
    heads = []
    with hub_errors(repo_id, endpoint, source.revision):
        for f in candidates:
            try:
                meta = api.parse_safetensors_file_metadata(repo_id, f.path, revision=commit)
                keys = list(meta.tensors)
            except (SafetensorsParsingError, KeyError, TypeError, ValueError) as exc:
                raise UnsupportedRepoError(
                    f"{repo_id}/{f.path} is not a readable safetensors file ({exc}). Nothing "
                    "was downloaded."
                ) from exc
            if any(key.startswith("mtp.") or ".mtp." in key for key in keys):
                heads.append(f)
    if not heads:
        raise UnsupportedRepoError(
            f"{repo_id} has weights but no config.json, and they are not an MTP head (no mtp.* "
            "tensors): FlashChat cannot tell what model they belong to."
        )
    weight_bytes = sum(f.size for f in heads)
    return RepoPlan(
        repo_id=repo_id,
        revision=source.revision,
        commit=commit,
        endpoint=endpoint,
        kind="mtp",
        files=tuple(sorted(heads, key=lambda f: f.path)),
        architecture="MTP head",
        max_context=0,
        weight_bytes=weight_bytes,
        memory_bytes=weight_bytes,
    )
