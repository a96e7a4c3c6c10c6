#!/usr/bin/env bash
# Scoring bench on the GPU machine (one H200), after the device bundle is installed:
#   bash /root/stage/install.sh          # vLLM 0.26 into /root/vsite, the GGUF into /root/models
#   OUT=/path/to/results bash bench/gpu_score.sh
# Prints one markdown table; OUT gets progress.log (written as it goes), table.md and results.json.
set -uo pipefail
cd "$(dirname "$0")/.."

# The exports of ../shared/device/env.sh (../shared is not on the GPU machine).
export PYTHONPATH=/root/vsite${PYTHONPATH:+:$PYTHONPATH}
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONUNBUFFERED=1
export VLLM_USE_FLASHINFER_SAMPLER=0        # flashinfer is not in the bundle; without this the engine fails to start
export VLLM_WORKER_MULTIPROC_METHOD=spawn   # fork after torch CPU work hangs engine start; needs a __main__ guard

OUT=${OUT:-bench/raw/$(date +%F)/score}  # the device tool sets $OUT; elsewhere: today's raw folder
MODEL=${MODEL:-/root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
N=${N:-20000}
# Engine knobs to try next if K=4 stays under 3,000 requests/s: with ~110 new tokens per request
# after prefix hits, 1024 sequences need ~113k tokens per step, so 65536 caps a step at ~600 requests.
MAX_NUM_SEQS=${MAX_NUM_SEQS:-1024}
MAX_BATCHED=${MAX_BATCHED:-65536}
mkdir -p "$OUT"

{
  date
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  python - <<'PY' || true
import importlib
for name in ("torch", "transformers", "peft", "vllm", "numpy"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as exc:  # report and go on: the bench logs its own failures per stage
        print(name, "IMPORT FAILED:", exc)
PY
} 2>&1 | tee "$OUT/versions.txt"

# Budget (900 s): prep (dequantize + 4 adapters) <= 240 s, vLLM (start ~100 s + base, 1 adapter, K=4
# over N items) <= 480 s, HF (2,048 items x K=4 + 512 base for parity) <= 170 s.
timeout 900 python bench/score_bench.py --engine both --model "$MODEL" --n "$N" \
  --prefix-tokens 800 --adapters 4 --n-parity 512 --hf-n 2048 \
  --max-num-seqs "$MAX_NUM_SEQS" --max-num-batched-tokens "$MAX_BATCHED" --gpu-memory-utilization 0.5 \
  --stage-timeout 240 --vllm-timeout 480 --budget 870 --out "$OUT"
status=$?
echo "score_bench exit status: $status (0 ok, 2 some configuration failed, 124 timeout)"
[ -f "$OUT/table.md" ] && cat "$OUT/table.md"
exit $status
