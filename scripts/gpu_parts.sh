#!/usr/bin/env bash
# What scripts/gpu_train_pair.py needs on a GPU machine without network, cut into parts a call
# can carry (at most 60 MiB each): MLX's CUDA build and the engine's other runtime wheels for
# that machine's Python (PYVER, default this one's) and the target (default: the 4-bit demo).
# Writes OUT/00/bundle.tar.part-00, OUT/01/..., one folder a call. About 480 MB for the demo:
# nine parts. Usage: bash scripts/gpu_parts.sh OUT [MODEL_FOLDER]
set -euo pipefail
OUT=${1:?parts folder}
PY=${PY:-.venv/bin/python}
PYVER=${PYVER:-$($PY -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')}
CUDA=${CUDA:-13}
MODEL=${2:-$($PY -m engine_mlx demo --all | grep -- '-4bit$' || true)}
[ -d "$MODEL" ] || { echo "no target folder: pass one (quantize the demo first)" >&2; exit 2; }
# manylinux tags are matched exactly when a platform is named: name the usual ones.
PLATFORMS=()
for tag in manylinux_2_35 manylinux_2_28 manylinux_2_17 manylinux2014; do
  PLATFORMS+=(--platform "${tag}_x86_64")
done
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/wheels" "$stage/model"
$PY -m pip download -q --dest "$stage/wheels" --only-binary=:all: \
  "${PLATFORMS[@]}" --python-version "$PYVER" \
  "mlx==0.32.4" "mlx-cuda-$CUDA==0.32.4" "mlx-lm==0.32.2" --no-deps
$PY -m pip download -q --dest "$stage/wheels" --only-binary=:all: \
  "${PLATFORMS[@]}" --python-version "$PYVER" \
  tokenizers "huggingface-hub>=1.20,<2" gguf transformers safetensors jinja2 pyyaml regex tqdm
cp -r "$MODEL" "$stage/model/"
tar -C "$stage" -cf "$stage/bundle.tar" wheels model
rm -rf "$OUT"
mkdir -p "$OUT"
split -b 60M -d -a 2 "$stage/bundle.tar" "$stage/bundle.tar.part-"
for part in "$stage"/bundle.tar.part-*; do
  n=${part##*-}
  mkdir -p "$OUT/$n"
  mv "$part" "$OUT/$n/"
done
du -sh "$OUT"/* | tr '\n' ' '; echo
