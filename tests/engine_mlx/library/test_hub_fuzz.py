"""Fuzzing the hub's answers: whatever a broken or hostile mirror sends (commit ids, tree
listings, sizes, hashes, status codes, JSON of any shape), a download ends in a FlashChat
error with a message, or succeeds, and never writes outside the library folder."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine_mlx.errors import EngineError
from engine_mlx.library.catalog import list_installed
from engine_mlx.library.download import DownloadOptions, pull
from engine_mlx.library.pending import pending_downloads
from engine_mlx.library.sources import HubSource

pytestmark = pytest.mark.slow  # fuzzing: seconds, not milliseconds

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
CLIMBING = ["../x.json", "..\\x.json", "/abs.json", "a/../../b.json", "C:\\x.json", ".", "a\x00b"]
PATHS = st.sampled_from([*CLIMBING, "config.json", "model.safetensors", "extra.safetensors"])
COMMITS = (
    st.sampled_from(["/../../../..0000000000000000000000000000", "../" * 14, "", "A" * 40])
    | st.text(max_size=48)
    | JSON
)
HASHES = st.sampled_from(["0" * 40, "f" * 64, "../../x", ""]) | st.text(max_size=70) | JSON
STATUSES = {
    "info": [200, 204, 301, 400, 401, 403, 404, 410, 429, 500, 503],
    "tree": [200, 204, 302, 400, 401, 403, 404, 410, 429, 500, 503],
    "resolve": [200, 204, 400, 401, 403, 404, 410, 416],  # 429/5xx: retried with back-off
}


@st.composite
def hub_answers(draw: st.DrawFn) -> dict[str, Any]:
    answer: dict[str, Any] = {}
    if draw(st.booleans()):
        answer["commit"] = draw(COMMITS)
    if draw(st.booleans()):
        entry = {
            "type": draw(st.sampled_from(["file", "file", "directory", 3])),
            "path": draw(PATHS),
            "size": draw(st.integers(-10, 2**62) | JSON),
            "oid": draw(HASHES),
        }
        if draw(st.booleans()):
            entry["lfs"] = {"oid": draw(HASHES), "size": entry["size"], "pointerSize": 134}
        answer["entry"] = entry
    if draw(st.integers(0, 9)) == 0:
        answer["tree"] = draw(JSON)
    if draw(st.integers(0, 9)) == 0:
        answer["info"] = draw(JSON)
    if draw(st.integers(0, 3)) == 0:
        kind = draw(st.sampled_from(sorted(STATUSES)))
        answer["status"] = (kind, draw(st.sampled_from(STATUSES[kind])))
    return answer


def _apply(hub, answer: dict[str, Any]) -> None:
    hub.rewrite.clear()
    hub.status.clear()
    hub.reported_commit = None
    commit = answer.get("commit")
    if "info" in answer:
        hub.rewrite["info"] = lambda _info: answer["info"]
    elif isinstance(commit, str) and commit:
        hub.reported_commit = commit  # consistently: listed, and files served at it
    elif "commit" in answer:
        hub.rewrite["info"] = lambda info: {**info, "sha": commit}
    if "tree" in answer:
        hub.rewrite["tree"] = lambda _tree: answer["tree"]
    elif "entry" in answer:
        hub.rewrite["tree"] = lambda tree: [*tree, answer["entry"]]
    if "status" in answer:
        kind, status = answer["status"]
        hub.status[kind] = status


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(answer=hub_answers())
def test_any_hub_answer_ends_in_an_error_or_an_install_inside_the_library(
    hub, publish, answer
) -> None:
    publish("org/tiny")
    _apply(hub, answer)
    options = DownloadOptions(
        endpoint=hub.endpoint, token=False, retries=0, retry_wait_s=0.0, timeout_s=5.0
    )
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        library = base / "data" / "models"
        library.mkdir(parents=True)
        try:
            path = pull(HubSource("org/tiny"), library, options=options)
        except EngineError as exc:
            assert str(exc).strip()
        else:
            assert path.parent == library
            assert [m.name for m in list_installed(library) if not m.problem] == ["tiny"]
        outside = [p for p in base.rglob("*") if library not in (p, *p.parents)]
        assert outside == [base / "data"]
        pending_downloads(library)  # whatever was left is readable
