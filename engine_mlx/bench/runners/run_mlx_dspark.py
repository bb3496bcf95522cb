"""mlx-dspark's z-lab DFlash loop (PyPI ``mlx-dspark``, ``dflash_generate``) behind the bench
protocol.

Runs in the ``mlx-dspark`` environment (see ``_protocol``). The target goes through its
``load_target(require_tap=True)``, which probes that its hidden-state tap reproduces the
model's own forward and raises ValueError for targets it cannot serve (reported as
unsupported). Its ``load_dflash`` quantizes the draft to 4 bits by default; here the draft
stays in full precision so that it runs the same weights, in the same dtype, as ours: the
comparison is of the decoding loops. Its stop set is built from the tokenizer's special
tokens, so EOS is ignored by emptying that set (its module function ``eos_token_ids``).
Steps are its verify rounds (``on_round``); the first token is timed by ``on_text``.
"""

from __future__ import annotations

import argparse

from _protocol import Loaded, Steps, Unsupported, serve


def load(args: argparse.Namespace) -> Loaded:
    import mlx.core as mx
    import mlx_dspark.generate as dspark
    from mlx_dspark.load import load_dflash, load_target

    try:
        target, tokenizer = load_target(args.target, require_tap=True)
    except ValueError as exc:  # its refusals: tap unfaithful or unsupported, family unknown
        raise Unsupported(str(exc)) from exc
    drafter, config = load_dflash(args.drafter, quantize=False)
    if int(config.block_size) != args.block:
        raise ValueError(f"drafter block {config.block_size} != requested {args.block}")
    if args.dtype:
        target.model.set_dtype(getattr(mx, args.dtype))
        drafter.set_dtype(getattr(mx, args.dtype))
    drafter.bind(target.model)
    dspark.eos_token_ids = lambda _tokenizer: set()  # always max_tokens

    def generate(prompt: list[int], max_tokens: int, steps: Steps) -> list[int]:
        def on_text(_text: str) -> None:
            if steps.count == 0:  # the prefill's token, before the first round
                steps.add(1)

        def on_round(*, committed: int, **_: object) -> None:
            steps.add(committed + (1 if steps.count == 0 else 0))

        result = dspark.dflash_generate(
            target,
            tokenizer,
            drafter,
            prompt_ids=list(prompt),
            max_new_tokens=max_tokens,
            temperature=0.0,
            apply_chat_template=False,
            on_text=on_text,
            on_round=on_round,
        )
        return list(result.token_ids)

    return Loaded(generate, {"drafter": "load_dflash(quantize=False)"})


if __name__ == "__main__":
    raise SystemExit(serve(load, "mlx-dspark"))
