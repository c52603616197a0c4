#!/usr/bin/env bash
# CUDA checks of the blockwise fp32 attention, for when a GPU is lent. Budget: under 8 minutes.
#
#   1. the Triton kernel tests compiled for the GPU (TRITON_INTERPRET=0; one uses the tile ladder) (<= 150 s)
#   2. bench/attention.py --device cuda at the full Gemma-3-12B global shape (16 / 8 heads, D=256),
#      L in {1k, 2k, 4k, 8k}: triton (ieee / tf32 / bf16 operands) vs sdpa (fp32, bf16) vs eager vs
#      flash-attn (when installed), time, peak CUDA memory, error vs fp64; longest L first, and the
#      result files are rewritten after every L, so a timeout keeps what finished       (<= 300 s)
#
# Writes bench/results/attention-<DATE>-cuda.{csv,png,md} and attention-<DATE>-cuda-tests.txt.
# Usage: bash bench/gpu_attention.sh [DATE]      (PYTHON=... to pick the interpreter)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
DATE=${1:-$(date +%F)}
OUT=bench/results
mkdir -p "$OUT"
export TRITON_INTERPRET=0 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$PY" - <<'EOF'
import torch, triton
print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.cuda.is_available(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
EOF

start=$(date +%s)
timeout 150 "$PY" -m pytest -q -p no:cacheprovider tests/train/test_attention_triton.py 2>&1 \
  | tail -n 40 | tee "$OUT/attention-$DATE-cuda-tests.txt"
echo "tests: $(( $(date +%s) - start )) s"

timeout 300 "$PY" bench/attention.py --device cuda --lengths 8192 4096 2048 1024 \
  --heads 16 --kv-heads 8 --head-dim 256 --reps 3 --timeout 120 --out "$OUT" --tag "$DATE"
echo "total: $(( $(date +%s) - start )) s"
