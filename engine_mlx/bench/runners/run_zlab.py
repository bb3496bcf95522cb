"""z-lab's MLX DFlash loop (PyPI ``dflash``, ``dflash/model_mlx.py``) behind the bench protocol.

Runs in the ``zlab`` environment (see ``_protocol`` for the protocol). The drafter is read
by z-lab's own ``load_draft``, its hub download pointed at the exported folder, so this also
checks that our v1 export is a checkpoint z-lab loads unchanged. Its loop patches the
target's layers, which is harmless here: this process owns its model. EOS is ignored by
emptying the tokenizer's EOS set, as the in-process mlx-lm baseline does.
"""

from __future__ import annotations

import argparse

from _protocol import Loaded, Steps, serve


def load(args: argparse.Namespace) -> Loaded:
    import mlx.core as mx
    from dflash import model_mlx as zl

    zl.snapshot_download = lambda repo_id, **_: repo_id  # a local folder, not a hub id
    draft = zl.load_draft(args.drafter)
    model, tokenizer = zl.load(args.target)
    if args.dtype:
        model.set_dtype(getattr(mx, args.dtype))
        draft.set_dtype(getattr(mx, args.dtype))
    tokenizer.eos_token_ids = set()  # always max_tokens

    def generate(prompt: list[int], max_tokens: int, steps: Steps) -> list[int]:
        out: list[int] = []
        for response in zl.stream_generate(
            model, draft, tokenizer, mx.array(prompt), block_size=args.block, max_tokens=max_tokens
        ):
            steps.add(len(response.tokens))
            out.extend(response.tokens)
        return out

    return Loaded(generate, {"drafter": "z-lab load_draft of the v1 export"})


if __name__ == "__main__":
    raise SystemExit(serve(load, "dflash"))
