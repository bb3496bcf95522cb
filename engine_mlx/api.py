"""The engine's public entry points, shared by the CLI, the bench and the app."""

from __future__ import annotations

from pathlib import Path

from engine_mlx.chat import ChatFormatter
from engine_mlx.errors import ChatTemplateError
from engine_mlx.models.target import TargetModel

Prompt = str | list[dict[str, str]]


def load_target(path: str | Path) -> TargetModel:
    """Validate and load a model folder (raises ModelLoadError with a readable message)."""
    return TargetModel.load(path)


def encode_prompt(
    target: TargetModel, prompt: Prompt, *, chat: bool | None = None, system: str | None = None
) -> list[int]:
    """Text or messages -> ids. ``chat=None`` uses the template when the model has one."""
    formatter = ChatFormatter(target.tokenizer)
    if isinstance(prompt, list):
        messages = list(prompt)
        if system and not any(m.get("role") == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": system})
        return formatter.encode_messages(messages)
    use_chat = formatter.has_template if chat is None else chat
    if not use_chat:
        if system:
            raise ChatTemplateError("--system needs the chat template; drop --raw.")
        return formatter.encode_raw(prompt)
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": prompt})
    return formatter.encode_messages(messages)
