#!/usr/bin/env bash
# Trains the demo pair shipped in resources/companions/SmolLM2-135M-Instruct/ from scratch:
# the target's own continuations -> a DFlash2 drafter and an MTP head (and the standalone draft
# LM that the benchmark's mlx-lm speculative baseline uses; not shipped). Every step resumes
# where it stopped when rerun. Usage: bash scripts/train_demo_pair.sh WORKDIR CORPORA_DIR
# (CORPORA_DIR: prose/*.txt and code/*.txt, e.g. from the offline corpora fetch script).
set -euo pipefail
WORK=${1:?work folder}; CORPORA=${2:?corpora folder}
PY=${PY:-.venv/bin/python}
MODEL=$($PY -m engine_mlx demo --all | grep 'SmolLM2-135M-Instruct$')
OUT=resources/companions/SmolLM2-135M-Instruct
mkdir -p "$WORK" "$OUT"
$PY -m engine_mlx make-dataset --model "$MODEL" --out "$WORK/data" --corpora "$CORPORA" \
  --shards "${SHARDS:-16}" --batch 48 --new-tokens 128 --prompt-lengths 64,128,256
$PY -m engine_mlx train-drafter --model "$MODEL" --data "$WORK/data" --out "$WORK/drafter" \
  --steps "${DRAFTER_STEPS:-900}" --layers 3 --block 8 --conv 4
for hidden in post pre; do
  $PY -m engine_mlx train-mtp --model "$MODEL" --data "$WORK/data" \
    --out "$WORK/mtp-$hidden.safetensors" --steps "${MTP_STEPS:-300}" --hidden "$hidden"
done
$PY -m engine_mlx train-draft-lm --model "$MODEL" --data "$WORK/data" --out "$WORK/draft-lm" \
  --steps "${DRAFT_LM_STEPS:-400}" --layers 2
