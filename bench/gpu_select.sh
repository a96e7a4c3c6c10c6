#!/usr/bin/env bash
# Selection bench on the GPU machine (one H200; python 3.12, torch 2.11 cuda, no Django):
#   OUT=/path/to/results bash bench/gpu_select.sh
# k-center on torch cuda with M=40,000 candidates, B=5,000, L=50,000 labeled, d=384 (goal < 2 s),
# plus a cuda-vs-cpu pick parity row. MiniLM embedding
# throughput runs only if an encoder directory is given (ENCODER_DIR, e.g. carried by
# `build-bundle.sh --embedder`); otherwise that row says "skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false

OUT=${OUT:-bench/raw/$(date +%F)/select}  # the device tool sets $OUT; elsewhere: today's raw folder
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/versions.txt" || true

ENCODER_ARGS=()
[ -n "${ENCODER_DIR:-}" ] && ENCODER_ARGS=(--encoder-dir "$ENCODER_DIR")
timeout 600 python bench/select_bench.py --gpu --repeats 5 "${ENCODER_ARGS[@]}" \
  --out "$OUT/select.json" | tee "$OUT/table.md"
exit "${PIPESTATUS[0]}"
