"""Help → About FlashChat: the version, what the app does and how this machine runs it."""

from __future__ import annotations

from engine_mlx.version import version


def about_text(backend_summary: str) -> str:
    """The About box's text; ``backend_summary``: the loaded model's backend line, or ""."""
    return (
        f"<h3>FlashChat {version()}</h3>"
        "<p>Chat with language models on this computer, decoded with DFlash2 speculative "
        "decoding: the same text as the model's own, faster.</p>"
        f"<p>{backend_summary or 'No model loaded'}</p>"
        "<p>Apache-2.0. Third-party licences: THIRD_PARTY.md.</p>"
    )
