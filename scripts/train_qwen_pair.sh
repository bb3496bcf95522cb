#!/usr/bin/env bash
# Trains the DFlash2 drafter and MTP head for Qwen2.5-Coder-0.5B-Instruct (the demo's pair) from
# scratch: the target's own continuations (contexts up to ~2.3k tokens; code, chat, prose and
# math; a quarter sampled at 0.7) -> a drafter and an MTP head -> resources/companions/.
# Every step resumes where it stopped when rerun; SHARDS stops the dataset early (the shipped
# drafter: 1,200 steps on the first 41 of 64 batches, then resumed to 2,800 steps on 60).
# The MTP head's 16 batches are the same prompts as the dataset's first 16 (same seed).
# Usage: bash scripts/train_qwen_pair.sh WORKDIR CORPORA_DIR
# (CORPORA_DIR: prose/*.txt and code/*.txt, e.g. from the offline corpora fetch script).
set -euo pipefail
WORK=${1:?work folder}; CORPORA=${2:?corpora folder}
PY=${PY:-.venv/bin/python}
NAME=Qwen2.5-Coder-0.5B-Instruct
MODEL=$($PY -m engine_mlx demo --all | grep "$NAME\$")
OUT=resources/companions/$NAME
mkdir -p "$WORK"
$PY -m engine_mlx make-dataset --model "$MODEL" --out "$WORK/data" --corpora "$CORPORA" \
  --shards "${SHARDS:-64}" --batch 32 --new-tokens 256 --prompt-lengths 128,384,768,128,256,1024,2040
$PY -m engine_mlx train-drafter --model "$MODEL" --data "$WORK/data" --out "$WORK/drafter" \
  --steps "${DRAFTER_STEPS:-2800}" --layers 3 --mlp 1216 --block 8 --conv 4
# The shipped MTP head was trained on the first 16 batches only (the same command with
# --shards 16, into its own folder; 88,720 generated tokens), 600 steps.
$PY -m engine_mlx make-dataset --model "$MODEL" --out "$WORK/mtp-data" --corpora "$CORPORA" \
  --shards "${MTP_SHARDS:-16}" --batch 32 --new-tokens 256 \
  --prompt-lengths 128,384,768,128,256,1024,2040
$PY -m engine_mlx train-mtp --model "$MODEL" --data "$WORK/mtp-data" \
  --out "$WORK/mtp.safetensors" --steps "${MTP_STEPS:-600}" --hidden pre
# --mtp-steps 1: the draft length measured best for this head (MODEL_CARD), kept in its file.
$PY -m engine_mlx export-pair --name "$NAME" --drafter "$WORK/drafter" \
  --mtp "$WORK/mtp.safetensors" --mtp-steps 1 --out "$OUT"
$PY -m engine_mlx plot-training "drafter=$OUT/drafter_history.json" --out "$OUT/drafter_loss.png"
$PY -m engine_mlx plot-training "mtp=$OUT/mtp_history.json" --out "$OUT/mtp_loss.png"
