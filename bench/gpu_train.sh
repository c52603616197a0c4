#!/usr/bin/env bash
# A few QLoRA training steps of the Gemma 3 12B preset shape on a lent GPU; prints tokens/s and peak
# memory. The weights are random (the real text config's sizes: 48 layers, hidden 3840, 16/8 heads of
# 256, vocab 262208, 5 sliding : 1 global), written once as safetensors and loaded through the
# recipe's own 4-bit path (nf4, double quantization, bf16 compute, LoRA all-linear, gradient
# checkpointing, padding-free packing, the preset's attention). Budget: under 8 minutes on one H200
# (about 1-2 min to build and save the random model, 1-2 min to load it in 4 bits, then the steps).
#
#   bash bench/gpu_train.sh                  # STEPS=6 MAX_LENGTH=4096 by default
#   STEPS=4 LAYERS=12 bash bench/gpu_train.sh   # a quicker, shallower run
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
WORK=${WORK_DIR:-${TMPDIR:-/tmp}/gemma3-12b-shape}
OUT=${OUT_DIR:-bench/results}
mkdir -p "$OUT" "$WORK"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
args=(--gpu-shape gemma-3-12b --steps "${STEPS:-6}" --max-length "${MAX_LENGTH:-4096}" --work-dir "$WORK"
      --json "$OUT/gpu-train-$(date +%Y-%m-%d)-gemma-3-12b-shape.json")
if [[ -n "${LAYERS:-}" ]]; then args+=(--layers "$LAYERS"); fi
# hard stop before the 8-minute budget so that the JSON of a slow run is still the last word
timeout "${BUDGET_S:-470}" "$PY" bench/train_throughput.py "${args[@]}"
nvidia-smi --query-gpu=memory.used --format=csv,noheader || true
