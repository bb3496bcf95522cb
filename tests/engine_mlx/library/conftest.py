"""A local hub (tests/support/hub_server.py) serving tiny generated models, and a library
folder per test; the real huggingface_hub client talks to the server."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine_mlx.library.download import DownloadOptions
from tests.support.hub_server import HubServer
from tests.support.library_fixtures import (  # noqa: F401  (fixtures)
    companions,
    hf_weights,
    hub,
    publish,
    tiny_gguf,
    tiny_vocab,
)


@pytest.fixture
def library(tmp_path: Path) -> Path:
    return tmp_path / "models"


@pytest.fixture
def options(hub: HubServer) -> DownloadOptions:  # noqa: F811
    """Download settings for the local hub: no saved token, fast reconnects, every event."""
    return DownloadOptions(
        endpoint=hub.endpoint, token=False, retry_wait_s=0.01, progress_interval_s=0.0
    )
