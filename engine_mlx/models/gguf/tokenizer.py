"""Rebuild a Hugging Face tokenizer from a GGUF's ``tokenizer.ggml.*`` metadata.

GGUF keeps the tokenizer as flat arrays (tokens, merges, token types) plus the name of
llama.cpp's pre-tokenizer regex; HF tools want ``tokenizer.json`` and its companion configs.
This module writes them so that the imported tokenizer splits and encodes text exactly as the
model was trained.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from engine_mlx.errors import GGUFImportError
from engine_mlx.models.gguf.reader import GGUFFile, meta

log = logging.getLogger(__name__)

# tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
_TOKEN_NORMAL, _TOKEN_CONTROL, _TOKEN_USER_DEFINED = 1, 3, 4

# Pre-tokenizer regexes, keyed by tokenizer.ggml.pre (llama.cpp's names).  The byte-level
# tokenizer is only right if words are split exactly as at training time, so an unknown name
# is an error rather than a silent GPT-2 guess.
_GPT2_PRE = ("gpt-2", "mpt", "olmo", "jais")
_DIGITS_PRE = (
    "smollm",
    "starcoder",
    "refact",
    "command-r",
    "codeshell",
    "exaone",
    "minerva-7b",
)
_LLAMA3_PRE = ("llama-bpe", "llama3", "llama-v3", "falcon3", "pixtral")
_QWEN2_PRE = ("qwen2", "qwen2.5", "qwen-2.5", "deepseek-r1-qwen", "stablelm2")
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SUPPORTED_PRE_TOKENIZERS = _GPT2_PRE + _DIGITS_PRE + _LLAMA3_PRE + _QWEN2_PRE


def _token_id(g: GGUFFile, key: str, n_tokens: int) -> int | None:
    value = meta(g, f"tokenizer.ggml.{key}", int, key.replace("_", " "), None)
    if value is None:
        return None
    if not 0 <= value < n_tokens:
        log.warning("%s: tokenizer.ggml.%s = %d is out of range", g.path.name, key, value)
        return None
    return value


def _pre_tokenizer(g: GGUFFile, add_prefix_space: bool) -> tuple[Any, bool]:
    """HF pre-tokenizer matching llama.cpp's regex for tokenizer.ggml.pre (+ ignore_merges)."""
    from tokenizers import Regex, pre_tokenizers

    pre = meta(g, "tokenizer.ggml.pre", str, "pre-tokenizer name", None)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=True)
    if pre is None:
        log.warning("%s has no tokenizer.ggml.pre; assuming GPT-2 pre-tokenization", g.path.name)
        return byte_level, False
    if pre in _GPT2_PRE:
        return byte_level, False
    if pre in _DIGITS_PRE:
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        ), False
    if pre in _LLAMA3_PRE or pre in _QWEN2_PRE:
        regex = _LLAMA3_REGEX if pre in _LLAMA3_PRE else _QWEN2_REGEX
        split = pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False)
        tail = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, use_regex=False)
        return pre_tokenizers.Sequence([split, tail]), pre in _LLAMA3_PRE
    raise GGUFImportError(
        f"{g.path.name} uses pre-tokenizer '{pre}', which this importer does not know "
        f"(known: {', '.join(SUPPORTED_PRE_TOKENIZERS)})"
    )


def tokenizer_files(g: GGUFFile, *, vocab_size: int, context_length: int) -> dict[str, Any]:
    """tokenizer.json (as text) plus tokenizer_config / special_tokens_map / generation_config.

    ``vocab_size`` is the number of embedding rows (the token list may not be longer);
    ``context_length`` becomes the tokenizer's ``model_max_length``.

    Only byte-level BPE ("gpt2" in GGUF) is rebuilt: it is fully described by the token list and
    merges.  SentencePiece ("llama") vocabularies would need their merges reconstructed from
    scores, which we do not attempt.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, processors
    from tokenizers.models import BPE

    name = g.path.name
    model = meta(g, "tokenizer.ggml.model", str, "tokenizer type")
    if model != "gpt2":
        raise GGUFImportError(
            f"{name} has a '{model}' tokenizer; only byte-level BPE ('gpt2') tokenizers "
            "can be imported"
        )
    tokens = meta(g, "tokenizer.ggml.tokens", list, "the vocabulary")
    merges_raw = meta(g, "tokenizer.ggml.merges", list, "the BPE merges")
    if not tokens or not all(isinstance(t, str) for t in tokens):
        raise GGUFImportError(f"{name} has an empty or invalid tokenizer.ggml.tokens")
    if len(tokens) > vocab_size:
        raise GGUFImportError(
            f"{name} has {len(tokens)} tokens but only {vocab_size} embedding rows"
        )
    n = len(tokens)
    types = g.metadata.get("tokenizer.ggml.token_type")
    if types is None:
        types = np.full(n, _TOKEN_NORMAL, dtype=np.int32)
    types = np.asarray(types)
    if types.shape != (n,):
        raise GGUFImportError(f"{name}: tokenizer.ggml.token_type does not match the token list")

    vocab: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        vocab.setdefault(tok, i)
    merges: list[tuple[str, str]] = []
    for m in merges_raw:
        cut = m.find(" ", 1) if isinstance(m, str) else -1
        if cut < 0:
            raise GGUFImportError(f"{name} has a malformed BPE merge: {m!r:.40}")
        merges.append((m[:cut], m[cut + 1 :]))

    add_prefix = meta(g, "tokenizer.ggml.add_space_prefix", bool, "prefix space", False)
    add_bos = meta(g, "tokenizer.ggml.add_bos_token", bool, "add BOS", False)
    add_eos = meta(g, "tokenizer.ggml.add_eos_token", bool, "add EOS", False)
    pre, ignore_merges = _pre_tokenizer(g, add_prefix)
    bos, eos, unk, pad, eot, eom = (
        _token_id(g, f"{key}_token_id", n)
        for key in ("bos", "eos", "unknown", "padding", "eot", "eom")
    )
    if add_bos and bos is None:
        raise GGUFImportError(f"{name} asks for a BOS token but has no tokenizer.ggml.bos_token_id")
    if add_eos and eos is None:
        raise GGUFImportError(
            f"{name} asks for an EOS token but has no tokenizer.ggml.eos_token_id"
        )

    try:
        tok = Tokenizer(BPE(vocab=vocab, merges=merges, ignore_merges=ignore_merges))
        tok.pre_tokenizer = pre
        tok.decoder = decoders.ByteLevel()
        if add_bos or add_eos:
            # Same post-processor shape as HF's Llama 3 tokenizer: specials around each sequence.
            def around(seq: str, type_id: int) -> list[str]:
                head = [f"{tokens[bos]}:{type_id}"] if add_bos else []
                tail = [f"{tokens[eos]}:{type_id}"] if add_eos else []
                return [*head, f"{seq}:{type_id}", *tail]

            used = {i for i, on in ((bos, add_bos), (eos, add_eos)) if on and i is not None}
            tok.post_processor = processors.TemplateProcessing(
                single=" ".join(around("$A", 0)),
                pair=" ".join([*around("$A", 0), *around("$B", 1)]),
                special_tokens=[(tokens[i], i) for i in sorted(used)],
            )
        else:
            tok.post_processor = processors.ByteLevel(trim_offsets=False)
        special_ids = [i for i in range(n) if types[i] == _TOKEN_CONTROL]
        for i in (bos, eos, unk, pad, eot, eom):
            if i is not None and i not in special_ids:
                special_ids.append(i)
        user_ids = [i for i in range(n) if types[i] == _TOKEN_USER_DEFINED and i not in special_ids]
        tok.add_special_tokens(
            [AddedToken(tokens[i], special=True, normalized=False) for i in sorted(special_ids)]
        )
        tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i in user_ids])
        tokenizer_json = tok.to_str(pretty=False)
    except Exception as exc:  # tokenizers raises plain Exception subclasses on bad vocab/merges
        raise GGUFImportError(f"{name} has an inconsistent tokenizer: {exc}") from exc

    added_decoder = {
        str(i): {
            "content": tokens[i],
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": i in special_ids,
        }
        for i in sorted([*special_ids, *user_ids])
    }
    special_map: dict[str, str] = {}
    for key, i in (
        ("bos_token", bos),
        ("eos_token", eos),
        ("unk_token", unk),
        ("pad_token", pad),
    ):
        if i is not None:
            special_map[key] = tokens[i]
    tok_config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": add_bos,
        "add_eos_token": add_eos,
        "add_prefix_space": add_prefix,
        "clean_up_tokenization_spaces": False,
        "model_max_length": context_length,
        **special_map,
        "added_tokens_decoder": added_decoder,
    }
    template = g.metadata.get("tokenizer.chat_template")
    if isinstance(template, str) and template.strip():
        tok_config["chat_template"] = template

    eos_ids = list(dict.fromkeys(i for i in (eos, eot, eom) if i is not None))
    gen_config: dict[str, Any] = {"_from_model_config": True}
    if bos is not None:
        gen_config["bos_token_id"] = bos
    if eos_ids:
        gen_config["eos_token_id"] = eos_ids[0] if len(eos_ids) == 1 else eos_ids
    if pad is not None:
        gen_config["pad_token_id"] = pad
    return {
        "tokenizer.json": tokenizer_json,
        "tokenizer_config.json": tok_config,
        "special_tokens_map.json": special_map,
        "generation_config.json": gen_config,
    }
