"""Request bodies fuzzed where the issue found 500s: nesting of any depth, and seeds of any
size — each is either taken or a 400 that names what to send instead, never an exception."""

from __future__ import annotations

import mlx.core as mx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine_mlx.config import GenerationConfig
from engine_mlx.server.requests import MAX_SEED, ApiError, parse_completion, parse_json

MESSAGES = [{"role": "user", "content": "Hi"}]


@settings(max_examples=40, deadline=None)
@given(
    depth=st.integers(1, 20) | st.integers(900, 1100) | st.integers(50_000, 200_000),
    opener=st.sampled_from([b"[", b'{"a":']),
)
def test_nesting_of_any_depth_is_parsed_or_a_400(depth: int, opener: bytes) -> None:
    closer = b"]" if opener == b"[" else b"}"
    raw = b'{"x":' + opener * depth + b"1" + closer * depth + b"}"
    try:
        body = parse_json(raw)
    except ApiError as exc:
        assert exc.status == 400 and "deeply" in exc.message
    else:
        assert set(body) == {"x"}


@pytest.fixture(scope="module")
def target(tiny_target):
    return tiny_target("llama")


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(-(2**70), 2**70) | st.sampled_from([-1, 0, MAX_SEED, MAX_SEED + 1]))
def test_seeds_of_any_size_are_taken_or_a_400_naming_the_range(target, seed: int) -> None:
    body = {"messages": MESSAGES, "seed": seed}
    try:
        req = parse_completion(body, target, GenerationConfig(), chat=True)
    except ApiError as exc:
        assert not 0 <= seed <= MAX_SEED
        assert exc.status == 400 and exc.param == "seed" and str(MAX_SEED) in exc.message
    else:
        assert req.config.sampling.seed == seed
        mx.random.key(seed)  # what failed with a 500 before
