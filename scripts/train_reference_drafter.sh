#!/usr/bin/env bash
# Trains a shipped pair's drafter again in llama.cpp's DFlash2 format (dynamic convolutions and
# the candidate selector), warm-started from the shipped drafter: teacher-forced data over the
# corpora (the target's distribution over corpus text, one forward per batch), then
# `train-drafter --reference`. Every step resumes where it stopped when rerun.
# Usage: bash scripts/train_reference_drafter.sh NAME WORKDIR CORPORA_DIR
# (NAME: SmolLM2-135M-Instruct or Qwen2.5-Coder-0.5B-Instruct; CORPORA_DIR: prose/ and code/,
# e.g. from the offline corpora fetch script.)
set -euo pipefail
NAME=${1:?target name}; WORK=${2:?work folder}; CORPORA=${3:?corpora folder}
PY=${PY:-.venv/bin/python}
MODEL=${MODEL:-$($PY -m engine_mlx demo --all | grep "/$NAME$")}  # or the form the app runs, e.g. its -4bit
SHIPPED=resources/companions/$NAME/$NAME-DFlash2
CAPTURE=$($PY -c "import json,sys; print(','.join(map(str, json.load(open(sys.argv[1]))['dflash_config']['target_layer_ids'])))" "$SHIPPED/config.json")
mkdir -p "$WORK"
$PY -m engine_mlx make-dataset --model "$MODEL" --out "$WORK/data" --corpora "$CORPORA" \
  --teacher-forced --shards "${SHARDS:-48}" --batch 16 --new-tokens 512 --prompt-lengths 128 \
  --capture "$CAPTURE" --seed 46
$PY -m engine_mlx train-drafter --model "$MODEL" --data "$WORK/data" --out "$WORK/reference" \
  --warm-start "$SHIPPED" --reference "${GROUP:-64}" --conv 4 --draft-vocab "${DRAFT_VOCAB:-0}" \
  --steps "${STEPS:-1500}" --lr "${LR:-3e-4}"
