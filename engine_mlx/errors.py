"""Errors a person can act on.

Every failure that reaches a user (CLI, app, bench) is one of these, with a message that names
the file or setting at fault and what to do about it.
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class: the message is meant for a person, not a stack trace."""


class ModelLoadError(EngineError):
    """A model folder or file is missing, truncated, inconsistent or unsupported."""


class GGUFImportError(ModelLoadError):
    """A GGUF file cannot be imported (missing, truncated, unsupported tensor type...)."""


class ContextOverflowError(EngineError):
    """The prompt (plus the requested tokens) does not fit in the model's context."""


class ChatTemplateError(EngineError):
    """The model has no chat template, or it failed to render the conversation."""
