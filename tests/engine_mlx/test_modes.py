"""One Mode type: ids, names, what a model offers, and the fallback when a companion is gone."""

from __future__ import annotations

import json
import subprocess
import sys

from engine_mlx.modes import (
    Mode,
    auto_candidates,
    available_modes,
    fallback,
    mode_label,
    mode_phrase,
    parse_mode,
)


def test_a_mode_is_its_id():
    assert Mode.DFLASH2 == "dflash2" and json.dumps({"mode": Mode.MTP}) == '{"mode": "mtp"}'
    assert parse_mode("lookup") is Mode.LOOKUP and parse_mode("turbo") is None
    assert [m.speculative for m in Mode] == [False, True, True, True, False]


def test_every_mode_has_a_label_and_a_phrase():
    assert [m.label for m in Mode] == ["Plain", "Prompt lookup", "DFlash2", "MTP", "Auto"]
    assert mode_phrase("ar") == "plain decoding"
    assert mode_label("turbo") == "turbo"  # an unknown id is shown, not hidden


def test_available_modes_follow_the_companions():
    assert available_modes(drafter=False, mtp=False) == (Mode.AR, Mode.LOOKUP, Mode.AUTO)
    assert available_modes(drafter=True, mtp=True) == (
        Mode.AR,
        Mode.LOOKUP,
        Mode.DFLASH2,
        Mode.MTP,
        Mode.AUTO,
    )
    # Prompt lookup is a mode of its own beside a drafter (its step pays no drafter forward).
    assert auto_candidates(drafter=True, mtp=False) == (Mode.AR, Mode.LOOKUP, Mode.DFLASH2)
    assert auto_candidates(drafter=True, mtp=False, lookup=False) == (Mode.AR, Mode.DFLASH2)
    assert auto_candidates(drafter=False, mtp=True) == (Mode.AR, Mode.LOOKUP, Mode.MTP)


def test_a_forced_mode_without_its_companion_falls_back_to_auto():
    offered = available_modes(drafter=False, mtp=True)
    assert fallback("mtp", offered) is Mode.MTP
    assert fallback("dflash2", offered) is Mode.AUTO  # the drafter was removed
    assert fallback("turbo", offered) is Mode.AUTO  # a stored id from another version
    assert fallback("lookup", []) is Mode.AUTO


def test_the_modes_module_loads_no_mlx():
    code = "import sys, engine_mlx.modes; print('mlx.core' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
