"""mlx-lm's own ``stream_generate`` as the baseline every ratio is taken against.

In-process, on the same folder and compute dtype as our engine; EOS is ignored so each run
is ``max_tokens`` long. With ``keep_prefill`` the prompt's prefill is done once and reused,
as our session's ``reuse_prompt`` does, so a run measures decoding alone (the suite);
without it every run prefills, and its prefill speed is measured too (``bench``). With a
``draft`` model it runs mlx-lm's own speculative loop.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import mlx.core as mx

from engine_mlx.bench.measure import Runner


def mlx_lm_runner(
    path: Path, dtype: mx.Dtype, draft: Path | None = None, *, keep_prefill: bool = True
) -> Runner:
    from mlx_lm import load, stream_generate
    from mlx_lm.models.cache import make_prompt_cache

    model, tokenizer = load(str(path))
    model.set_dtype(dtype)
    tokenizer.eos_token_ids = set()  # always max_tokens, like ignore_eos
    draft_model = None
    if draft is not None:
        draft_model, _ = load(str(draft))
        draft_model.set_dtype(dtype)
    kept: dict[tuple[int, ...], list[Any]] = {}

    def prefilled(prompt: list[int]) -> list[Any]:
        key = tuple(prompt[:-1])
        if key not in kept:
            cache = make_prompt_cache(model)
            if draft_model is not None:
                cache += make_prompt_cache(draft_model)
            kept.clear()
            for start in range(0, len(key), 512):
                chunk = mx.array(key[start : start + 512])[None]
                model(chunk, cache=cache[: len(model.layers)])
                if draft_model is not None:
                    draft_model(chunk, cache=cache[len(model.layers) :])
                mx.eval([c.state for c in cache])
            kept[key] = [(type(c), c.state) for c in cache]
        return [cls.from_state(state) for cls, state in kept[key]]

    def run(prompt: list[int], max_tokens: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"draft_model": draft_model} if draft_model is not None else {}
        if keep_prefill:
            kwargs["prompt_cache"] = prefilled(prompt)
        fed = prompt[-1:] if keep_prefill else prompt
        out, drafted = [], 0
        start = time.perf_counter()
        first = last = None
        for r in stream_generate(model, tokenizer, mx.array(fed), max_tokens=max_tokens, **kwargs):
            last = time.perf_counter()
            first = first or last
            out.append(r.token)
            drafted += bool(getattr(r, "from_draft", False))
        decode = (len(out) - 1) / (last - first) if len(out) > 1 and last > first else 0.0
        steps = len(out) - drafted  # each verify ends with one token of the target's own
        result = {
            "decode_tps": decode,
            "ttft_s": first - start,
            "tokens": len(out),
            "tau": len(out) / max(1, steps),
            "output": out,
        }
        if not keep_prefill:
            result["prefill_tps"] = len(prompt) / (first - start)
        return result

    return run
