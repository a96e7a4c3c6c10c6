#!/usr/bin/env bash
# One sitting on the GPU machine after the bundle parts are in /root/stage: install, then the scoring
# bench (vLLM base / 1 adapter / K=4 mixed, hf K=4, parity) and the selection bench, inside one
# 10-minute call. Results are copied flat into $OUT (at most 8 files come back).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/root/vsite${PYTHONPATH:+:$PYTHONPATH}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0 VLLM_WORKER_MULTIPROC_METHOD=spawn TOKENIZERS_PARALLELISM=false
OUT=${OUT:-/tmp/gpu-out}
( cd /root/stage && bash install.sh ) 2>&1 | tail -3
W=/root/work; mkdir -p $W
timeout "${SCORE_BUDGET:-450}" python bench/score_bench.py --engine both --model /root/models/SmolLM2-135M-Instruct.Q4_1.gguf \
  --n "${N:-20000}" --prefix-tokens 800 --adapters 4 --n-parity 512 --hf-n 2048 \
  --max-num-seqs "${MAX_NUM_SEQS:-1024}" --max-num-batched-tokens "${MAX_BATCHED:-131072}" --gpu-memory-utilization 0.5 \
  --stage-timeout 200 --vllm-timeout "${VLLM_TIMEOUT:-330}" --budget $(( ${SCORE_BUDGET:-450} - 15 )) --out $W/score
echo "score_bench exit: $?"
for f in table.md results.json progress.log; do [ -f $W/score/$f ] && cp $W/score/$f "$OUT/score-$f"; done
OUT=$W/select ENCODER_DIR=/root/models/all-MiniLM-L6-v2 timeout 100 bash bench/gpu_select.sh
for f in table.md select.json; do [ -f $W/select/$f ] && cp $W/select/$f "$OUT/select-$f"; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$OUT/gpu.txt"
