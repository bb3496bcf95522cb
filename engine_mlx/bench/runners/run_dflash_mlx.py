"""dflash-mlx's DFlash runtime (PyPI ``dflash-mlx``) behind the bench protocol.

Runs in the ``dflash-mlx`` environment (see ``_protocol``). Loading goes through its own
``load_runtime_bundle`` with the exported v1 folder as the draft, with its default runtime
settings (verify mode "dflash", no draft quantization for a local draft). It picks "target
ops" per architecture and refuses the others with NotImplementedError, reported as
unsupported. Prompts go in as token ids (``prompt_tokens_override``) and no stop tokens are
passed, so it always generates max_tokens. A step is one of its verify cycles.
"""

from __future__ import annotations

import argparse

from _protocol import Loaded, Steps, Unsupported, serve


def load(args: argparse.Namespace) -> Loaded:
    import mlx.core as mx
    from dflash_mlx.engine.events import TokenEvent
    from dflash_mlx.runtime import stream_dflash_generate
    from dflash_mlx.runtime.bundle import load_runtime_bundle
    from dflash_mlx.runtime.context import build_offline_runtime_context

    context = build_offline_runtime_context()
    try:
        bundle = load_runtime_bundle(
            model_ref=args.target, draft_ref=args.drafter, verify_config=context.verify
        )
    except NotImplementedError as exc:  # its "unsupported target architecture" signal
        raise Unsupported(str(exc)) from exc
    if args.dtype:
        bundle.target_model.set_dtype(getattr(mx, args.dtype))
        bundle.draft_model.set_dtype(getattr(mx, args.dtype))

    def generate(prompt: list[int], max_tokens: int, steps: Steps) -> list[int]:
        out: list[int] = []
        cycle = None
        stream = stream_dflash_generate(
            target_model=bundle.target_model,
            target_ops=bundle.target_ops,
            tokenizer=bundle.tokenizer,
            draft_model=bundle.draft_model,
            draft_backend=bundle.draft_backend,
            prompt="",
            max_new_tokens=max_tokens,
            block_tokens=args.block,
            stop_token_ids=[],
            prompt_tokens_override=list(prompt),
            runtime_context=context,
        )
        try:
            for event in stream:
                if isinstance(event, TokenEvent):
                    steps.add(1, new_step=event.cycles_completed != cycle)
                    cycle = event.cycles_completed
                    out.append(int(event.token_id))
        finally:
            stream.close()
        return out

    return Loaded(generate, {"target_ops": bundle.target_ops.backend_name})


if __name__ == "__main__":
    raise SystemExit(serve(load, "dflash-mlx"))
