"""The engine's public entry points, shared by the CLI, the bench and the app."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine_mlx.chat import ChatFormatter, check_messages
from engine_mlx.companions import NO_DRAFTER, Companions, shipped_companions
from engine_mlx.decoding.dflash_drafter import DFlashDrafter
from engine_mlx.decoding.draft_vocab import load_draft_vocab
from engine_mlx.decoding.mtp_drafter import MTPDrafter
from engine_mlx.errors import ChatTemplateError, ModelLoadError
from engine_mlx.models.dflash import (
    DFlashConfig,
    DFlashModel,
    default_target_layer_ids,
    save_dflash,
)
from engine_mlx.models.drafters import load_drafter as load_drafter_model
from engine_mlx.models.loading import text_config
from engine_mlx.models.mtp import MTPUnavailable, load_mtp
from engine_mlx.models.target import TargetModel

Prompt = str | list[dict[str, str]]


def load_target(path: str | Path) -> TargetModel:
    """Validate and load a model folder (raises ModelLoadError with a readable message);
    in a pipeline ``mlx.launch`` started, rank 0's part of it (``distributed``)."""
    from engine_mlx.distributed.launch import joined, load_part

    pipeline = joined()
    return TargetModel.load(path) if pipeline is None else load_part(path, pipeline)


def load_drafter(path: str | Path, target: TargetModel) -> DFlashDrafter:
    """Load a DFlash / DFlash2 drafter and bind it to ``target`` (refused if it does not fit),
    with its draft vocabulary when the folder has one."""
    model = load_drafter_model(path)
    try:
        vocab = load_draft_vocab(path, target.spec.vocab_size) if Path(path).is_dir() else None
    except ValueError as exc:
        raise ModelLoadError(f"{Path(path).name}: {exc}") from exc
    return DFlashDrafter(model, target, vocab)


def load_mtp_drafter(
    target: TargetModel,
    file: str | Path | None = None,
    steps: int | None = None,
    hidden: str | None = None,
) -> tuple[MTPDrafter | None, str]:
    """The target's built-in MTP head (or the one in ``file``), or None and the reason."""
    try:
        return MTPDrafter(load_mtp(target, file), target, steps, hidden), ""
    except MTPUnavailable as exc:
        return None, str(exc)


@dataclass(frozen=True)
class Speculators:
    """What a session drafts with, and where each part came from (for the UI and reports)."""

    drafter: DFlashDrafter | None
    mtp: MTPDrafter | None
    mtp_reason: str  # why there is no MTP head ("" when there is one)
    drafter_path: Path | None
    mtp_source: str  # "built-in head", "shipped head", a file name, or ""


def load_speculators(
    target: TargetModel,
    drafter: str | Path | None = None,
    mtp_file: str | Path | None = None,
    *,
    mtp_steps: int | None = None,
    mtp_hidden: str | None = None,
    companions: bool = True,
) -> Speculators:
    """The drafter and MTP head a session gets: the ones named, else (with ``companions``)
    the pair shipped for this target, else its built-in MTP head. ``drafter=NO_DRAFTER``:
    none, even where one is shipped."""
    shipped = shipped_companions(target.spec) if companions else Companions()
    named = None if drafter == NO_DRAFTER else Path(drafter) if drafter else None
    drafter_path = named or (shipped.drafter if drafter != NO_DRAFTER else None)
    dflash = load_drafter(drafter_path, target) if drafter_path else None
    head_file = mtp_file or shipped.mtp
    mtp, reason = load_mtp_drafter(target, head_file, mtp_steps, mtp_hidden)
    source = ""
    if mtp is not None:
        source = (
            Path(mtp_file).name if mtp_file else "shipped head" if head_file else "built-in head"
        )
    return Speculators(dflash, mtp, reason, drafter_path, source)


def init_drafter(
    target_path: str | Path,
    out: str | Path,
    *,
    layers: int = 2,
    block: int = 8,
    conv: int = 4,
    seed: int = 0,
) -> Path:
    """A randomly initialised DFlash2 drafter sized for the target: the starting point of
    training, and a stand-in for measuring costs before a trained drafter exists."""
    import mlx.core as mx

    target = load_target(target_path)
    config = drafter_config_for(target, layers=layers, block=block, conv=conv)
    mx.random.seed(seed)
    return save_dflash(DFlashModel(config), out)


def drafter_config_for(
    target: TargetModel,
    *,
    layers: int,
    block: int,
    conv: int,
    capture: tuple[int, ...] | None = None,
    mlp: int = 0,
) -> DFlashConfig:
    """A DFlash2 drafter shaped like ``target``'s layers (so they can seed it), reading the
    target layers ``capture`` (default: one per draft layer, spaced evenly); ``mlp`` > 0 makes
    its MLPs that wide instead of the target's (a smaller drafter file)."""
    spec = target.spec
    tc = text_config(spec.config)
    heads = int(tc["num_attention_heads"])
    ids = capture if capture is not None else default_target_layer_ids(spec.num_layers, layers)
    return DFlashConfig(
        hidden_size=spec.hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=int(tc.get("num_key_value_heads") or heads),
        head_dim=int(tc.get("head_dim") or spec.hidden_size // heads),
        intermediate_size=mlp or int(tc["intermediate_size"]),
        vocab_size=spec.vocab_size,
        num_target_layers=spec.num_layers,
        target_layer_ids=tuple(ids),
        block_size=block,
        mask_token_id=resolve_mask_token_for(target),
        rms_norm_eps=float(tc.get("rms_norm_eps", 1e-6)),
        rope_theta=float(tc.get("rope_theta", 10000.0)),
        max_position_embeddings=spec.max_context,
        local_conv_kernel=conv,
    )


def resolve_mask_token_for(target: TargetModel) -> int:
    """A mask id for a new drafter: ``<|MASK|>`` if the tokenizer has it, else a token the
    model never needs to emit as text (the pad / end-of-text token)."""
    vocab = target.tokenizer.get_vocab()
    if "<|MASK|>" in vocab:
        return int(vocab["<|MASK|>"])
    pad = getattr(target.tokenizer, "pad_token_id", None)
    return int(pad if pad is not None else 0)


def encode_prompt(
    target: TargetModel,
    prompt: Prompt,
    *,
    chat: bool | None = None,
    system: str | None = None,
    template_kwargs: dict[str, Any] | None = None,
) -> list[int]:
    """Text or messages -> ids. ``chat=None`` uses the template when the model has one;
    ``template_kwargs`` go to it (``enable_thinking``)."""
    formatter = ChatFormatter(target.tokenizer)
    if isinstance(prompt, list):
        messages = check_messages(list(prompt))
        if system and not any(m.get("role") == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": system})
        return formatter.encode_messages(messages, template_kwargs)
    use_chat = formatter.has_template if chat is None else chat
    if not use_chat:
        if system:
            raise ChatTemplateError("--system needs the chat template; drop --raw.")
        return formatter.encode_raw(prompt)
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    return formatter.encode_messages(messages, template_kwargs)
