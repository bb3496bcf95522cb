"""App tests that add models use the library's local hub and tiny companions."""

from __future__ import annotations

from tests.support.library_fixtures import (  # noqa: F401  (fixtures)
    companions,
    hf_weights,
    hub,
    publish,
    tiny_gguf,
    tiny_vocab,
)
