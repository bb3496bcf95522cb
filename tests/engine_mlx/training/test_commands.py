"""The training commands' own parsing: a bad ``--mix`` is a message a person can act on."""

import pytest

from engine_mlx.errors import EngineError
from engine_mlx.training.commands import parse_mix


def test_a_mix_names_categories_and_their_shares():
    assert parse_mix("math=0.35, chat=0.35,code=0.2,prose=0.1") == {
        "math": 0.35, "chat": 0.35, "code": 0.2, "prose": 0.1,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("poetry=1", r"'poetry=1' is not CATEGORY=SHARE .* math, chat, code, prose"),
        ("math", r"'math' is not CATEGORY=SHARE"),
        ("math=lots", r"share of math must be a positive number, not 'lots'"),
        ("math=0,chat=1", r"share of math must be a positive number, not '0'"),
        ("math=nan", r"share of math must be a positive number"),
        ("code=inf", r"share of code must be a positive number"),
    ],
)
def test_a_bad_mix_says_what_is_wrong(text, message):
    with pytest.raises(EngineError, match=message):
        parse_mix(text)
