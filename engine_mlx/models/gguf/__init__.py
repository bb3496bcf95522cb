"""Import llama.cpp GGUF files into Hugging Face-layout model folders.

``import_gguf`` is the entry point; ``reader``, ``tokenizer`` and ``llama`` do the translating.
"""

from __future__ import annotations

from engine_mlx.models.gguf.importer import MARKER_NAME, SUPPORTED_DTYPES, import_gguf, is_imported

__all__ = ["MARKER_NAME", "SUPPORTED_DTYPES", "import_gguf", "is_imported"]
