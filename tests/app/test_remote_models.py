"""The remote models kept in the settings: damaged entries are dropped, valid ones kept in
order."""

from __future__ import annotations

import json

from app.remote_models import saved_remote_models
from engine_mlx.remote import Endpoint


def test_valid_specs_are_kept_and_damaged_ones_dropped():
    good = Endpoint("http://127.0.0.1:8080/v1", "qwen").to_spec()
    saved = json.dumps([good, "not a url", 42])
    assert saved_remote_models(saved) == [good]
    assert saved_remote_models("{broken") == []
    assert saved_remote_models('{"a": 1}') == []
