"""The decode loop hands every sampled row exactly its own context.

``tests/engine_mlx/decoding/test_exact_losslessness.py`` proves the acceptance rule exact given
each node's distribution; what is left to the loop is that the distribution a token is drawn
from counts the right tokens: the prompt, every token committed before it, and (for a tree
node) its own path, whatever mode ran before, however steps were pipelined or handed over.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from engine_mlx.auto.step_costs import StepCosts
from engine_mlx.config import GenerationConfig
from engine_mlx.decoding import strategies
from engine_mlx.decoding.acceptance import path_tokens
from engine_mlx.decoding.mtp_drafter import MTPDrafter
from engine_mlx.decoding.sampling import Sampler, SamplingParams
from engine_mlx.events import Finished, ModeSwitch
from engine_mlx.generation import Generation
from engine_mlx.modes import Mode
from engine_mlx.session import Session
from tests.support.auto_driver import drive_auto
from tests.support.drafters import OracleDrafter, random_mtp_head

PROMPT = "one two three one two three one two"
PENALISED = SamplingParams(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.5, seed=5)


class ContextLedger:
    """Records what each sampled row counted, checked against the reply once it is known."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.generation: Generation | None = None
        self.plain_rows: list[tuple[int, set[int], int]] = []  # (committed, seen, extra token)
        self.tree_rows: list[tuple[int, set[int], list[set[int]], list[int]]] = []
        ledger = self
        init, context, accept = Generation.__init__, Sampler.context, strategies.accept

        def remembering_init(gen, *args, **kwargs):
            init(gen, *args, **kwargs)
            ledger.generation = gen

        def noting_context(sampler, logits, extra=None, rows=None):
            if extra is not None and extra.ndim == 1:  # plain decoding's queued forward
                gen = ledger.generation
                seen = ledger.seen(sampler, logits.shape[-1])
                ledger.plain_rows.append((len(gen.tokens), seen, int(extra[0].item())))
            return context(sampler, logits, extra, rows)

        def noting_accept(tree, logits, sampler):
            gen = ledger.generation
            seen = ledger.seen(sampler, logits.shape[-1])
            rows = [set(r) for r in np.array(path_tokens(tree)).tolist()]
            result = accept(tree, logits, sampler)
            ledger.tree_rows.append((len(gen.tokens), seen, rows, [0, *result.path]))
            return result

        monkeypatch.setattr(Generation, "__init__", remembering_init)
        monkeypatch.setattr(Sampler, "context", noting_context)
        monkeypatch.setattr(strategies, "accept", noting_accept)

    @staticmethod
    def seen(sampler: Sampler, vocab: int) -> set[int]:
        return set(np.nonzero(np.array(sampler._seen_mask(vocab)))[0].tolist())

    def check(self, prompt: list[int], reply: list[int]) -> None:
        for committed, seen, extra in self.plain_rows:
            assert seen == set(prompt + reply[:committed])
            # The token this row's forward feeds: the one its step commits (pipelined), or,
            # in a step that took over from another mode, the newest committed one.
            assert extra in reply[max(0, committed - 1) : committed + 1]
        for committed, seen, rows, walked in self.tree_rows:
            assert seen == set(prompt + reply[:committed])
            root = committed - 1  # the tree's root: the newest committed token
            for depth, node in enumerate(walked):
                if root + depth < len(reply):
                    assert rows[node] == set(reply[root : root + depth + 1]), (depth, node)


@pytest.fixture(params=["llama", "qwen3_5"])
def target(request, tiny_target):
    return tiny_target(request.param)


@pytest.mark.parametrize(
    ("mode", "width"),
    [("ar", 1), ("dflash2", 1), ("dflash2", 3), ("lookup", 3), ("mtp", 1), ("auto", 2)],
)
def test_every_sampled_row_counts_the_committed_context_and_its_own_path(
    mode, width, target, monkeypatch
):
    ids = target.tokenizer.encode(PROMPT)
    mtp = MTPDrafter(random_mtp_head(target), target, steps=2)
    session = Session(target, OracleDrafter(target, block_size=4), mtp)
    if mode == "auto":  # a change of mode at nearly every step, plain decoding among them
        cheap = StepCosts({(n, 0): 0.05 for n in (1, 2, 4)})
        modes = (Mode.AR, Mode.AR, Mode.DFLASH2, Mode.MTP, Mode.AR, Mode.DFLASH2)
        drive_auto(monkeypatch, lambda k: cheap, lambda k, current: modes[k % len(modes)])
    ledger = ContextLedger(monkeypatch)
    config = GenerationConfig(
        max_tokens=24, mode=mode, width=width, ignore_eos=True, sampling=PENALISED
    )
    events = list(session.generate(ids, config))
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.reason == "max_tokens"
    ledger.check(ids, list(finished.tokens))
    if mode in ("ar", "auto"):
        assert ledger.plain_rows
    if mode != "ar":
        assert ledger.tree_rows
    if mode == "dflash2":  # the oracle's drafts are accepted: paths were walked
        assert any(len(walked) > 1 for *_, walked in ledger.tree_rows)
    if mode == "auto":
        assert sum(isinstance(e, ModeSwitch) for e in events) >= 4


def test_the_ledger_catches_a_context_one_token_short(tiny_target, monkeypatch):
    """The check has teeth: a sampler that forgets the newest committed token is caught."""
    target = tiny_target("llama")
    ids = target.tokenizer.encode(PROMPT)
    remember = Sampler.remember

    def forgetful(sampler, tokens):
        remember(sampler, list(tokens)[:-1] if len(tokens) == 1 else tokens)

    monkeypatch.setattr(Sampler, "remember", forgetful)
    ledger = ContextLedger(monkeypatch)
    config = GenerationConfig(max_tokens=12, ignore_eos=True, sampling=PENALISED)
    finished = list(Session(target).generate(ids, config))[-1]
    with pytest.raises(AssertionError):
        ledger.check(ids, list(finished.tokens))
    mx.clear_cache()
