"""``bench --acceptance``: every mode on every held-out conversation, greedy and sampled, with
per-category totals whose arithmetic is the definitions'."""

from __future__ import annotations

import json
import math

import pytest

from engine_mlx.bench.acceptance import (
    APP_SAMPLING,
    auto_against_best,
    sampling_settings,
    summarise,
)
from engine_mlx.cli import main
from engine_mlx.models.dflash import save_dflash
from engine_mlx.models.mtp import save_mtp
from engine_mlx.stats import TIME_PARTS
from tests.support.drafters import random_dflash, random_mtp_head

PROMPTS = [
    {"id": "q1", "category": "code", "messages": [{"role": "user", "content": "Sort a list."}]},
    {
        "id": "q2",
        "category": "multi",
        "messages": [
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "Tell me more."},
        ],
    },
]


def test_every_mode_answers_every_prompt_and_greedy_replies_agree(
    tiny_model_dir, tiny_target, tmp_path, capsys
):
    target = tiny_target("llama")
    drafter = save_dflash(random_dflash(target, conv=2, block=4), tmp_path / "drafter")
    mtp = save_mtp(random_mtp_head(target), tmp_path / "mtp.safetensors")
    prompts, out = tmp_path / "prompts.jsonl", tmp_path / "acceptance.json"
    prompts.write_text("".join(json.dumps(p) + "\n" for p in PROMPTS))
    args = ["bench", "--acceptance", "--model", str(tiny_model_dir("llama")), "--prompts"]
    args += [str(prompts), "--drafter", str(drafter), "--mtp", str(mtp), "--seeds", "2"]
    assert main([*args, "--max-tokens", "12", "--json-out", str(out)]) == 0
    report = json.loads(out.read_text())
    runs = report["runs"]
    assert len(runs) == 2 * 3 * 4  # prompts x (greedy + 2 seeds) x modes
    for prompt in ("q1", "q2"):
        greedy = [r["output"] for r in runs if r["prompt"] == prompt and r["setting"] == "greedy"]
        assert len(greedy) == 4 and all(o == greedy[0] for o in greedy)
    cells = {(r["setting"], r["category"], r["mode"]) for r in report["summary"]}
    assert len(cells) == 2 * 3 * 4  # settings x (2 categories + all) x modes
    for row in report["summary"]:
        if row["mode"] == "ar":
            assert row["tau"] == 1.0 and row["acceptance"] is None and row["vs_ar"] == 1.0
        assert row["decode_tps"] > 0
    assert "sampled" in capsys.readouterr().out
    for row in report["summary"]:  # where each mode's time went, every part accounted for
        assert set(row["time_split"]) == set(TIME_PARTS)
        if row["mode"] == "ar":
            assert row["time_split"]["looks"] == row["time_split"]["policy"] == 0
    assert {(r["setting"], r["prompt"]) for r in report["auto_against_best"]} == {
        (s, p) for s in ("greedy", "sampled") for p in ("q1", "q2")
    }


def test_auto_is_held_to_the_best_fixed_mode_of_each_prompt():
    def run(prompt, mode, tps):
        return {"setting": "greedy", "prompt": prompt, "mode": mode, "decode_tokens": tps,
                "decode_s": 1.0}  # fmt: skip

    copy = [run("copy", "ar", 40), run("copy", "lookup", 60), run("copy", "auto", 57)]
    chat = [run("chat", "ar", 50), run("chat", "lookup", 40), run("chat", "auto", 49)]
    rows = auto_against_best([*copy, *chat])
    get = {r["prompt"]: r for r in rows}
    assert get["copy"]["best_mode"] == "lookup" and get["copy"]["auto_vs_best"] == 0.95
    assert get["copy"]["auto_vs_ar"] == pytest.approx(57 / 40)
    assert get["chat"]["best_mode"] == "ar" and get["chat"]["auto_vs_best"] == 0.98


def test_totals_weigh_replies_by_their_steps_and_compare_with_plain_decoding():
    def run(mode, tokens, steps, seconds, tested=0, accepted=0, category="code"):
        return {
            "setting": "greedy",
            "category": category,
            "mode": mode,
            "decode_tokens": tokens,
            "decode_steps": steps,
            "decode_s": seconds,
            "tested": tested,
            "accepted": accepted,
        }

    rows = summarise(
        [
            run("ar", 10, 10, 1.0),
            run("ar", 30, 30, 3.0, category="math"),
            run("dflash2", 10, 2, 0.5, tested=14, accepted=8),
            run("dflash2", 30, 18, 2.0, tested=40, accepted=12, category="math"),
        ]
    )
    get = {(r["category"], r["mode"]): r for r in rows}
    assert get[("code", "dflash2")]["tau"] == 5.0
    assert get[("all", "dflash2")]["tau"] == 2.0  # 40 tokens / 20 steps, not the mean of 5 and 1.7
    assert get[("all", "dflash2")]["acceptance"] == pytest.approx(20 / 54)
    assert get[("all", "dflash2")]["vs_ar"] == pytest.approx((40 / 2.5) / (40 / 4.0))
    assert get[("math", "ar")]["replies"] == 1 and get[("all", "ar")]["replies"] == 2


def test_sampling_settings_default_to_greedy_and_the_apps_sampling_per_seed():
    default = sampling_settings(None, 3)
    assert [name for name, _ in default] == ["greedy", "sampled", "sampled", "sampled"]
    assert default[0][1].temperature == 0 and {p.seed for _, p in default[1:]} == {0, 1, 2}
    assert all(p.top_k == 20 and p.top_p == 0.8 for _, p in default[1:])
    assert [name for name, _ in sampling_settings(0, 3)] == ["greedy"]
    assert all(math.isclose(p.temperature, 1.0) for _, p in sampling_settings(1.0, 2))


def test_the_app_sampling_is_the_apps_default():
    from app.settings import AppSettings

    app = AppSettings()
    assert (app.temperature, app.top_k, app.top_p, app.repetition_penalty) == (
        APP_SAMPLING.temperature,
        APP_SAMPLING.top_k,
        APP_SAMPLING.top_p,
        APP_SAMPLING.repetition_penalty,
    )
