"""A local HTTP server that speaks the part of the Hugging Face Hub's API a download uses.

The real ``huggingface_hub`` client talks to it (``endpoint=server.endpoint``), so tests run
the real listing, metadata and ranged-download code against real sockets, offline:

- ``GET /api/models/{repo}`` and ``/api/models/{repo}/revision/{rev}``: repo info with
  ``sha`` and ``siblings`` (sizes, blob ids and LFS data with ``?blobs=true``);
- ``GET /api/models/{repo}/tree/{rev}[/{path}]``: the file tree with sizes and LFS sha256;
- ``HEAD|GET /{repo}/resolve/{rev}/{file}``: ``X-Repo-Commit``, ``ETag``, ``X-Linked-Etag``
  and ``X-Linked-Size`` (LFS files), ``Content-Length``, ranged GETs answered with 206.

Errors carry ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``) as
the hub's do. Faults a test can switch on: a file served with one byte flipped (``corrupt``),
the connection dropped after N bytes of a file, once (``drop_after``), a bandwidth limit
(``throttle_bps``, for screenshots), and a hostile or broken mirror: ``rewrite["info"]`` /
``rewrite["tree"]`` replace the JSON the API sends, ``status["info" | "tree" | "resolve"]``
answers with that HTTP status and no hub error code, ``reported_commit`` is the commit id the
server gives for every repository (and serves files at) instead of the real one. ``requests``
logs every file request (method, file, Range header, body bytes written);
``served(name, since=mark)`` sums what was sent.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".gguf", ".bin")
SEND_BLOCK = 16 * 1024


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a file's content (what the hub reports for non-LFS files)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class FileRequest:
    """One HEAD or GET of a file, and how many body bytes the server wrote for it."""

    method: str
    name: str
    range: str | None
    sent: int = 0


@dataclass
class HubRepo:
    """One model repository at one commit (``main`` points at it)."""

    repo_id: str
    files: dict[str, bytes]
    commit: str = ""
    branches: dict[str, str] = field(default_factory=dict)
    _entries: dict[str, tuple[bytes, dict]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if not self.commit:
            digest = hashlib.sha1(self.repo_id.encode())
            for name in sorted(self.files):
                digest.update(name.encode() + hashlib.sha256(self.files[name]).digest())
            self.commit = digest.hexdigest()
        self.branches.setdefault("main", self.commit)

    def resolve(self, revision: str) -> str | None:
        if revision in self.branches:
            return self.branches[revision]
        return self.commit if revision == self.commit else None

    @staticmethod
    def is_lfs(name: str) -> bool:
        return name.endswith(LFS_SUFFIXES)

    def entry(self, name: str) -> dict:
        """The tree entry of a file (hashed once per content: models can be large)."""
        data = self.files[name]
        cached = self._entries.get(name)
        if cached is not None and cached[0] is data:
            return cached[1]
        out = {"type": "file", "oid": git_blob_sha1(data), "size": len(data), "path": name}
        if self.is_lfs(name):
            out["lfs"] = {
                "oid": hashlib.sha256(data).hexdigest(),
                "size": len(data),
                "pointerSize": 134,
            }
        self._entries[name] = (data, out)
        return out


def repo_from_folder(repo_id: str, folder: Path, extra: dict[str, bytes] | None = None) -> HubRepo:
    """A repo holding every file of ``folder`` (plus ``extra`` files, e.g. a README)."""
    files = {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }
    files.update(extra or {})
    return HubRepo(repo_id, files)


class HubServer:
    """``with HubServer() as hub: hub.add(repo); ... endpoint=hub.endpoint``."""

    def __init__(self) -> None:
        self.repos: dict[str, HubRepo] = {}
        self.corrupt: set[str] = set()  # file names served with one byte flipped
        self.drop_after: dict[str, int] = {}  # file name -> bytes sent before hanging up, once
        self.throttle_bps: float = 0.0
        self.rewrite: dict[str, Callable[[Any], Any]] = {}  # "info" | "tree": payload -> sent
        self.status: dict[str, int] = {}  # "info" | "tree" | "resolve": forced HTTP status
        self.reported_commit: str | None = None  # a mirror's own idea of the commit id
        self.requests: list[FileRequest] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    def add(self, repo: HubRepo) -> HubRepo:
        self.repos[repo.repo_id] = repo
        return repo

    def mark(self) -> int:
        """A point in the request log: ``served(..., since=mark)`` counts only later ones."""
        with self._lock:
            return len(self.requests)

    def served(self, name: str | None = None, since: int = 0) -> int:
        """Body bytes written for file ``name`` (every file: None) by requests since ``since``."""
        with self._lock:
            return sum(r.sent for r in self.requests[since:] if name in (None, r.name))

    def file_requests(self, name: str, method: str = "GET", since: int = 0) -> list[str | None]:
        """The Range headers of every ``method`` request for file ``name``."""
        with self._lock:
            return [r.range for r in self.requests[since:] if r.method == method and r.name == name]

    def start(self) -> HubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- used by the handler ------------------------------------------------------------
    def record(self, method: str, name: str, rng: str | None) -> FileRequest:
        entry = FileRequest(method, name, rng)
        with self._lock:
            self.requests.append(entry)
        return entry

    def count(self, entry: FileRequest, n: int) -> None:
        with self._lock:
            entry.sent += n

    def take_drop(self, name: str) -> int | None:
        with self._lock:
            return self.drop_after.pop(name, None)


_API = re.compile(r"^/api/models/([^/]+/[^/]+)(?:/(revision|tree)/([^/]+)(?:/(.*))?)?$")
_RESOLVE = re.compile(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


def _make_handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_: object) -> None:  # keep test output clean
            pass

        # -- helpers --------------------------------------------------------------------
        def _error(self, status: int, code: str, message: str) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forced(self, kind: str) -> bool:
            """Answer with the status a test forced for this kind of request, if any."""
            status = hub.status.get(kind)
            if status is None:
                return False
            body = b'{"error": "forced"}'
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
            return True

        def _repo_and_commit(self, repo_id: str, rev: str) -> tuple[HubRepo, str] | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
                return None
            if hub.reported_commit is not None and (
                unquote(rev) == hub.reported_commit or repo.resolve(unquote(rev))
            ):
                return repo, hub.reported_commit
            commit = repo.resolve(unquote(rev))
            if commit is None:
                self._error(404, "RevisionNotFound", f"Invalid rev id: {unquote(rev)}")
                return None
            return repo, commit

        # -- API ------------------------------------------------------------------------
        def do_GET(self) -> None:
            url = urlsplit(self.path)
            match = _API.match(url.path)
            if match:
                self._api(match, parse_qs(url.query))
                return
            self._resolve(send_body=True)

        def do_HEAD(self) -> None:
            self._resolve(send_body=False)

        def _api(self, match: re.Match, query: dict[str, list[str]]) -> None:
            repo_id, kind, rev, sub = match.groups()
            if self._forced("tree" if kind == "tree" else "info"):
                return
            found = self._repo_and_commit(repo_id, rev or "main")
            if found is None:
                return
            repo, commit = found
            if kind == "tree":
                prefix = (unquote(sub) + "/") if sub else ""
                names = sorted(n for n in repo.files if n.startswith(prefix))
                recursive = query.get("recursive", ["False"])[0].lower() == "true"
                entries, folders = [], set()
                for name in names:
                    rest = name[len(prefix) :]
                    if "/" in rest and not recursive:
                        folders.add(prefix + rest.split("/")[0])
                        continue
                    entries.append(repo.entry(name))
                tree = [{"type": "directory", "oid": "0" * 40, "path": f} for f in sorted(folders)]
                self._json(hub.rewrite.get("tree", lambda t: t)(tree + entries))
                return
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            siblings = []
            for name in sorted(repo.files):
                if blobs:
                    entry = repo.entry(name)
                    sibling = {"rfilename": name, "size": entry["size"], "blobId": entry["oid"]}
                    if "lfs" in entry:
                        lfs = entry["lfs"]
                        sibling["lfs"] = {
                            "sha256": lfs["oid"],
                            "size": lfs["size"],
                            "pointerSize": lfs["pointerSize"],
                        }
                    siblings.append(sibling)
                else:
                    siblings.append({"rfilename": name})
            info = {"id": repo_id, "modelId": repo_id, "sha": commit, "siblings": siblings}
            self._json(hub.rewrite.get("info", lambda i: i)(info))

        def _resolve(self, send_body: bool) -> None:
            match = _RESOLVE.match(urlsplit(self.path).path)
            if not match:
                self._error(404, "NotFound", f"No route for {self.path}")
                return
            repo_id, rev, name = match.group(1), match.group(2), unquote(match.group(3))
            if self._forced("resolve"):
                return
            found = self._repo_and_commit(repo_id, rev)
            if found is None:
                return
            repo, commit = found
            rng = self.headers.get("Range")
            log = hub.record(self.command, name, rng)
            if name not in repo.files:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound")
                self.send_header("X-Repo-Commit", commit)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = repo.files[name]
            entry = repo.entry(name)
            if name in hub.corrupt:
                data = bytes([data[0] ^ 0xFF]) + data[1:]
            start, end = 0, len(data) - 1
            status = 200
            if rng:
                m = _RANGE.match(rng.strip())
                if not m or int(m.group(1)) >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                start = int(m.group(1))
                end = min(int(m.group(2)), end) if m.group(2) else end
                status = 206
            body = memoryview(data)[start : end + 1]
            self.send_response(status)
            self.send_header("X-Repo-Commit", commit)
            self.send_header("Accept-Ranges", "bytes")
            self.send_header("Content-Type", "application/octet-stream")
            if "lfs" in entry:
                self.send_header("ETag", f'"{entry["oid"]}"')
                self.send_header("X-Linked-Etag", f'"{entry["lfs"]["oid"]}"')
                self.send_header("X-Linked-Size", str(entry["size"]))
            else:
                self.send_header("ETag", f'"{entry["oid"]}"')
            if status == 206:
                self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if not send_body:
                return
            limit = hub.take_drop(name)
            self._send(log, body if limit is None else body[:limit])
            if limit is not None:
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

        def _send(self, log: FileRequest, body: memoryview) -> None:
            t0, sent = time.monotonic(), 0
            for i in range(0, len(body), SEND_BLOCK):
                block = body[i : i + SEND_BLOCK]
                try:
                    self.wfile.write(block)
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                    return
                hub.count(log, len(block))
                sent += len(block)
                if hub.throttle_bps:  # pace the stream, for screenshots of a download
                    ahead = sent / hub.throttle_bps - (time.monotonic() - t0)
                    if ahead > 0:
                        time.sleep(ahead)

    return Handler
