"""The installed models: what each is, which ones pair, what to get next, and removal.

Everything here is read from configs, manifests and safetensors headers (a few kB per
model), never from weights, so the library view opens at once however big the models are.
Pairing reuses the engine's own fit rule for drafters (``dflash_drafter.fit_problems``) so
the view says "fits" exactly when loading would succeed, and gives the same reason when not.
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine_mlx.errors import EngineError, ModelLoadError
from engine_mlx.library.hub import is_drafter_config
from engine_mlx.library.manifest import MANIFEST_NAME, partial_root, read_json, read_manifest
from engine_mlx.models.loading import read_safetensors_header
from engine_mlx.paths import models_dir

GGUF_MARKER = "flashchat_import.json"


@dataclass(frozen=True)
class KnownDrafter:
    """A published drafter and the target shape it was trained for."""

    repo_id: str
    trained_for: str
    model_type: str
    hidden_size: int
    num_layers: int
    vocab_size: int


KNOWN_DRAFTERS = (
    KnownDrafter("z-lab/Qwen3-4B-DFlash-b16", "Qwen3-4B", "qwen3", 2560, 36, 151936),
    KnownDrafter("z-lab/Qwen3-8B-DFlash-b16", "Qwen3-8B", "qwen3", 4096, 36, 151936),
)
"""z-lab's DFlash drafters, matched by the target's shape so that MLX conversions and
quantized copies of the same model get the suggestion too."""


@dataclass(frozen=True)
class InstalledModel:
    """One folder of the library. ``problem`` is why it would not load ('' when it would)."""

    name: str
    path: Path
    kind: str  # "target", "drafter" or "mtp"
    architecture: str
    size_bytes: int
    quantization: str
    max_context: int
    hidden_size: int
    vocab_size: int
    num_layers: int
    source: str  # "hub ORG/NAME @ commit", "GGUF import", "local folder", ...
    repo_id: str = ""
    builtin_mtp: bool = False
    problem: str = ""

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["path"] = str(self.path)
        return d


@dataclass(frozen=True)
class Pairing:
    """Whether ``companion`` (a drafter or an MTP head) can serve ``target``, and why not."""

    target: str
    companion: str
    kind: str  # "drafter" or "mtp"
    fits: bool
    reason: str


@dataclass(frozen=True)
class Suggestion:
    target: str
    repo_id: str
    reason: str


def mtp_tensors(files: list[Path]) -> dict[str, list[int]]:
    """``mtp.*`` tensor name (prefix stripped) -> shape, over ``files``."""
    out = {}
    for file in files:
        for key, info in read_safetensors_header(file).items():
            if key.startswith("mtp.") or ".mtp." in key:
                out[key[key.index("mtp.") + 4 :]] = list(info["shape"])
    return out


def _quantization(config: dict[str, Any], weights: list[Path] = ()) -> str:
    """ "4-bit, group 64", "fp8"... or the float type (from the config, else the weights)."""
    from engine_mlx.models.loading import text_config

    q = config.get("quantization") or config.get("quantization_config")
    if isinstance(q, dict):
        if q.get("bits"):  # modules named with other bits (a GGUF's 8-bit head): "4/8-bit"
            bits = {q["bits"]} | {
                v["bits"] for v in q.values() if isinstance(v, dict) and "bits" in v
            }
            width = "/".join(str(b) for b in sorted(bits))
            return f"{width}-bit" + (f", group {q['group_size']}" if "group_size" in q else "")
        if q.get("quant_method"):
            return str(q["quant_method"])
    dtype = str(text_config(config).get("torch_dtype") or config.get("dtype") or "")
    if not dtype and weights:
        return _dtype_of(weights[0])
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, dtype or "–")


def _size(folder: Path) -> int:
    try:
        return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    except OSError:
        return 0


def _common(folder: Path, source: str) -> dict[str, Any]:
    return {"name": folder.name, "path": folder, "size_bytes": _size(folder), "source": source}


def _source(folder: Path) -> tuple[str, str]:
    manifest = read_manifest(folder)
    if manifest:
        if manifest.get("source") == "hub":
            repo = str(manifest.get("repo_id", ""))
            return f"{repo} @ {str(manifest.get('commit', ''))[:12]}", repo
        if manifest.get("source") == "local":
            return "copied from a local folder", ""
        if manifest.get("source") == "file":
            return "added from a file", ""
        if manifest.get("source") == "gguf":
            return f"imported from {Path(str(manifest.get('from', 'a GGUF file'))).name}", ""
    if (folder / GGUF_MARKER).is_file():
        marker = read_json(folder / GGUF_MARKER) or {}
        return f"imported from {marker.get('source_name', 'a GGUF file')}", ""
    return "placed by hand", ""


def describe(folder: Path) -> InstalledModel | None:
    """What ``folder`` holds, or None when it is no model at all."""
    from engine_mlx.models.loading import read_config, text_config, validate_model_folder

    source, repo_id = _source(folder)
    common = _common(folder, source)
    if not (folder / "config.json").is_file():
        files = sorted(folder.glob("*.safetensors"))
        try:
            tensors = mtp_tensors(files) if files else {}
        except ModelLoadError:
            tensors = {}
        if not tensors:
            return None
        hidden = (tensors.get("fc.weight") or [0])[0]
        return InstalledModel(
            **common,
            kind="mtp",
            architecture="MTP head",
            quantization=_dtype_of(files[0]),
            max_context=0,
            hidden_size=int(hidden),
            vocab_size=0,
            num_layers=1,
            repo_id=repo_id,
        )
    try:
        config = read_config(folder)
    except ModelLoadError as exc:
        return _broken(common, repo_id, str(exc))
    if is_drafter_config(config):
        from engine_mlx.models.dflash import DFlashConfig

        try:
            cfg = DFlashConfig.from_dict(config, f"{folder.name}/config.json")
        except ModelLoadError as exc:
            return _broken(common, repo_id, str(exc))
        return InstalledModel(
            **common,
            kind="drafter",
            architecture=f"DFlash{'2' if cfg.local_conv_kernel or cfg.reference_dflash2 else ''}, "
            f"block {cfg.block_size}",
            quantization=_quantization(config, sorted(folder.glob("*.safetensors"))),
            max_context=cfg.max_position_embeddings,
            hidden_size=cfg.hidden_size,
            vocab_size=cfg.vocab_size,
            num_layers=cfg.num_hidden_layers,
            repo_id=repo_id,
        )
    tc = text_config(config)
    problem = ""
    try:
        spec = validate_model_folder(folder)
        hidden, vocab, layers, context = (
            spec.hidden_size,
            spec.vocab_size,
            spec.num_layers,
            spec.max_context,
        )
    except ModelLoadError as exc:
        problem = str(exc)
        hidden = int(tc.get("hidden_size") or 0)
        vocab = int(tc.get("vocab_size") or 0)
        layers = int(tc.get("num_hidden_layers") or 0)
        context = int(tc.get("max_position_embeddings") or 0)
    weights = sorted(folder.glob("model*.safetensors"))
    try:
        builtin = bool(mtp_tensors(weights)) if weights and not problem else False
    except ModelLoadError:
        builtin = False
    return InstalledModel(
        **common,
        kind="target",
        architecture=str(config.get("model_type")),
        quantization=_quantization(config),
        max_context=context,
        hidden_size=hidden,
        vocab_size=vocab,
        num_layers=layers,
        repo_id=repo_id,
        builtin_mtp=builtin,
        problem=problem,
    )


def _dtype_of(file: Path) -> str:
    try:
        header = read_safetensors_header(file)
    except ModelLoadError:
        return "–"
    names = {"F32": "fp32", "F16": "fp16", "BF16": "bf16"}
    dtypes = {names.get(str(v.get("dtype")), str(v.get("dtype")).lower()) for v in header.values()}
    return "/".join(sorted(dtypes)) or "–"


def _broken(common: dict, repo_id: str, problem: str) -> InstalledModel:
    return InstalledModel(
        **common,
        kind="target",
        architecture="?",
        quantization="–",
        max_context=0,
        hidden_size=0,
        vocab_size=0,
        num_layers=0,
        repo_id=repo_id,
        problem=problem,
    )


def list_installed(root: Path | None = None) -> list[InstalledModel]:
    """Every installed model, drafter and MTP head, by name. Folders whose name starts with a
    dot (downloads and imports in progress, removals) are not installed."""
    root = Path(root) if root is not None else models_dir()
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(root.iterdir(), key=lambda p: p.name.lower()):
        if folder.name.startswith(".") or not folder.is_dir():
            continue
        try:
            model = describe(folder)
        except (EngineError, OSError) as exc:  # unreadable: listed with the reason, not fatal
            model = _broken(_common(folder, "placed by hand"), "", str(exc))
        if model is not None:
            out.append(model)
    return out


def drafter_fit(drafter: InstalledModel, target: InstalledModel) -> list[str]:
    """The engine's own rule (``dflash_drafter.fit_problems``), from the configs."""
    from engine_mlx.decoding.dflash_drafter import fit_problems
    from engine_mlx.models.dflash import DFlashConfig
    from engine_mlx.models.loading import ModelSpec, read_config

    cfg = DFlashConfig.from_dict(read_config(drafter.path), drafter.name)
    spec = ModelSpec(
        path=target.path,
        config={},
        model_type=target.architecture,
        num_layers=target.num_layers,
        hidden_size=target.hidden_size,
        vocab_size=target.vocab_size,
        max_context=target.max_context,
    )
    return fit_problems(cfg, spec)


def mtp_fit(head: InstalledModel, target: InstalledModel) -> list[str]:
    """An MTP file fits when its fc and its layer have the target's sizes."""
    problems = []
    if head.hidden_size != target.hidden_size:
        problems.append(f"MTP head hidden size {head.hidden_size}, target {target.hidden_size}")
    tensors = mtp_tensors(sorted(head.path.glob("*.safetensors")))
    target_shapes = _layer_shapes(target.path)
    for name in ("self_attn.q_proj.weight", "self_attn.k_proj.weight", "mlp.gate_proj.weight"):
        mine = tensors.get(f"layers.0.{name}")
        theirs = target_shapes.get(name)
        if mine and theirs and mine != theirs:
            problems.append(f"MTP {name.split('.')[1]} shape {mine}, target {theirs}")
    return problems


def _layer_shapes(folder: Path) -> dict[str, list[int]]:
    """Shapes of one full-attention layer's tensors in a target's checkpoint."""
    shapes: dict[str, list[int]] = {}
    for file in sorted(folder.glob("model*.safetensors")):
        for key, info in read_safetensors_header(file).items():
            if "mtp." in key or ".layers." not in key:
                continue
            tail = key.split(".layers.", 1)[1].split(".", 1)
            if len(tail) == 2 and tail[1] not in shapes:
                shapes[tail[1]] = list(info.get("shape", []))
    return shapes


def pairings(models: list[InstalledModel]) -> list[Pairing]:
    """Every target with every drafter and MTP head (and its built-in head)."""
    targets = [m for m in models if m.kind == "target" and not m.problem]
    out = []
    for target in targets:
        if target.builtin_mtp:
            out.append(Pairing(target.name, "built-in MTP head", "mtp", True, ""))
        for other in models:
            if other.kind not in ("drafter", "mtp") or other.problem:
                continue
            fit = drafter_fit if other.kind == "drafter" else mtp_fit
            try:
                problems = fit(other, target)
            except EngineError as exc:
                problems = [str(exc)]
            out.append(
                Pairing(target.name, other.name, other.kind, not problems, "; ".join(problems))
            )
    return out


def suggestions(models: list[InstalledModel]) -> list[Suggestion]:
    """Known drafters for installed targets that have no fitting drafter yet."""
    installed_repos = {m.repo_id for m in models if m.repo_id}
    fitting = {(p.target) for p in pairings(models) if p.kind == "drafter" and p.fits}
    out = []
    for target in models:
        if target.kind != "target" or target.problem or target.name in fitting:
            continue
        for known in KNOWN_DRAFTERS:
            shape = (target.architecture, target.hidden_size, target.num_layers, target.vocab_size)
            wanted = (known.model_type, known.hidden_size, known.num_layers, known.vocab_size)
            if shape == wanted and known.repo_id not in installed_repos:
                out.append(
                    Suggestion(
                        target.name,
                        known.repo_id,
                        f"DFlash drafter trained for {known.trained_for}, which "
                        f"{target.name} matches in shape",
                    )
                )
    return out


def remove_model(folder: Path, root: Path | None = None) -> None:
    """Delete an installed model. It is first renamed out of the library (so it disappears
    at once and a crash cannot leave half of it listed), then deleted."""
    root = (Path(root) if root is not None else models_dir()).resolve()
    folder = Path(folder)
    if folder.resolve().parent != root or folder.name.startswith(".") or not folder.is_dir():
        raise EngineError(f"{folder} is not a model in the library ({root}); nothing removed.")
    trash = partial_root(root) / f".trash-{folder.name}-{uuid.uuid4().hex[:8]}"
    trash.parent.mkdir(parents=True, exist_ok=True)
    folder.rename(trash)
    shutil.rmtree(trash, ignore_errors=True)


__all__ = [
    "KNOWN_DRAFTERS",
    "MANIFEST_NAME",
    "InstalledModel",
    "Pairing",
    "Suggestion",
    "describe",
    "list_installed",
    "pairings",
    "remove_model",
    "suggestions",
]
