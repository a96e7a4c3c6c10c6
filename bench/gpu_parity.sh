#!/usr/bin/env bash
# vLLM <-> hf parity on trained and random adapters, and the vLLM engine's cold and warm start
# (issue 35, points 3 and 4), with bench/engine_parity.py. One sitting on the GPU machine:
#
#   here:   bash ../shared/device/build-bundle.sh && bash bench/gpu_parity.sh pack
#           # -> .parity-stage/part-00..05 (the GGUF, then vLLM's site: 39 MB each), MANIFEST, whl/ (gguf)
#   there, one call per part, back to back (the machine goes back ~30 s after a call):
#     bash bench/gpu_parity.sh stage                             # part-00, part-01 (with MANIFEST)
#     bash bench/gpu_parity.sh stage && bash bench/gpu_parity.sh prep   # part-02: the GGUF is whole
#     bash bench/gpu_parity.sh stage                             # part-03, part-04
#     bash bench/gpu_parity.sh stage && bash bench/gpu_parity.sh vllm   # part-05: vLLM's site is whole
#
# The GGUF travels first so that everything without vLLM (dequantize, train, random adapters, the hf
# scores of every variant) runs while vLLM's parts are still on their way. prep: train K=4 adapters
# as the GPU profile does on 500 TREC labels, make the old bench's random adapters (all linear layers,
# and the top 8 layers), score every set with every hf variant. vllm: install vLLM, then the vLLM
# worker with an empty compile cache (cold: engine start -> first shard of 2,000 items x K=4, then every
# set), a second vLLM worker on the same cache (warm), the report. Each writes under $OUT as it goes.
set -uo pipefail
cd "$(dirname "$0")/.."
MODE=${1:?usage: gpu_parity.sh pack|stage|prep|vllm}
# Where things go there (PARITY_* override them for a dry run elsewhere).
STAGE=${PARITY_STAGE:-/root/stage}
P=${PARITY_ROOT:-/root/parity}
MODEL=${PARITY_MODEL:-/root/models/smollm2-135m-instruct}
GGUF=${PARITY_GGUF:-/root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
VSITE=${PARITY_VSITE:-/root/vsite}
DATA=.parity-data                 # TREC's train.csv and test.csv, carried (../shared does not travel)
N_TRAIN=${N_TRAIN:-500}           # a 500-label round, the size the GPU profile's numbers were measured at
K=${K:-4}                         # Project.ensemble_k's default
N_TEST=${N_TEST:-0}               # TREC test items scored (0: all 500)
NEWS_N=${NEWS_N:-512}             # the old bench's prompt: the 512 items its 88 % was measured on
SHARD=${SHARD:-2000}              # scoring.pipeline.SHARD_ITEMS: the first shard a GPU worker scores
VARIANTS=${VARIANTS:-hf-fp32,hf-bf16-full,hf-bf16-unpacked,hf-fp32-full}
BUDGET=${BUDGET:-540}             # seconds for this call's steps: a call may run 600
DEADLINE=$(( $(date +%s) + BUDGET ))
OUT=${OUT:-bench/raw/$(date +%F)/parity}  # the device tool sets $OUT; elsewhere: today's raw folder
export PARITY_COMMIT=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
mkdir -p "$OUT"
[ "$MODE" = pack ] || mkdir -p "$P/logs"

say() { echo "$(date +%H:%M:%S) [gpu_parity $MODE] $*" | tee -a "$OUT/progress.log" "$P/progress.log" 2>/dev/null; }
left() { local l=$(( DEADLINE - $(date +%s) )); (( l > $1 )) && echo "$1" || echo $(( l > 5 ? l : 5 )); }
step() {  # step NAME TIMEOUT CMD...: one step under timeout, its exit status logged
  local name=$1 limit; limit=$(left "$2"); shift 2
  say "step $name: start (timeout ${limit}s)"
  local t0=$SECONDS; timeout -k 10 "$limit" "$@" 2>&1 | tee -a "$OUT/progress.log" "$P/logs/$name.log"
  local rc=${PIPESTATUS[0]}; say "step $name: exit $rc in $(( SECONDS - t0 ))s"; return "$rc"
}
versions() {
  {
    echo "commit $PARITY_COMMIT; engine_parity.py sha256 $(sha256sum bench/engine_parity.py | cut -d' ' -f1)"
    date; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
    python3 -c 'import importlib
for n in ("torch", "transformers", "peft", "vllm", "numpy", "gguf"):
    try: print(n, importlib.import_module(n).__version__)
    except Exception as e: print(n, "not importable:", type(e).__name__)'
    echo "options: N_TRAIN=$N_TRAIN K=$K N_TEST=$N_TEST NEWS_N=$NEWS_N SHARD=$SHARD VARIANTS=$VARIANTS BUDGET=$BUDGET MODEL=$MODEL"
    echo "sha256 of the code that scores and trains:"
    sha256sum scoring/engines/*.py scoring/toplayers.py scoring/prompts.py scoring/labels.py scoring/pipeline.py \
      training/lora.py training/ensemble.py training/graphstep.py bench/score_bench.py
    echo "sets: ${SETS[*]}"
  } > "$OUT/versions.txt" 2>&1
}
have_bytes() { local s=0 f; for f in "$STAGE"/part-*; do [ -f "$f" ] && s=$(( s + $(stat -c %s "$f") )); done; echo $s; }

# The checked set (the trained adapters on TREC's test split) and the diagnostic sets.
adapters() { local d=$1 prefix=$2 k out=""; for k in $(seq 0 $(( K - 1 ))); do out+="${out:+,}$d/${prefix}_$k"; done; echo "$out"; }
SETS=("random-all-news=news:$(adapters "$P/random-all" random)" "random-all=data:$(adapters "$P/random-all" random)"
      "random-top=data:$(adapters "$P/random-top" random)" "random-top-news=news:$(adapters "$P/random-top" random)"
      "base=data:" "base-news=news:")
compare_cmd() {  # CMP=(the compare command): the checked set, the diagnostic sets in SETS, shared options
  CMP=(python3 bench/engine_parity.py compare --model "$MODEL" --data "$DATA/test.csv" --labels-from "$DATA/train.csv"
       --work "$P/work" --name trained --adapters $(adapters "$P/adapters" prod | tr , ' ') --variants "$VARIANTS"
       --n "$N_TEST" --news-n "$NEWS_N" --deadline "$DEADLINE")
  local s; for s in "${SETS[@]}"; do CMP+=(--set "$s"); done
}

case $MODE in
pack)  # here, on the CPU machine: the bundle's two files as parts, the GGUF first
  [ -f .device-bundle/part-00 ] || { echo "run ../shared/device/build-bundle.sh first"; exit 1; }
  for d in /.parity-stage/ /.parity-data/; do grep -qx "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  cat .device-bundle/part-* | tar xf - -C "$tmp"
  g=$(ls "$tmp"/models/*.gguf); s=$tmp/site.tar.xz
  rm -rf .parity-stage && mkdir -p .parity-stage/whl
  printf 'gguf %s %s\nsite %s %s\n' "$(stat -c %s "$g")" "$(sha256sum < "$g" | cut -d' ' -f1)" \
    "$(stat -c %s "$s")" "$(sha256sum < "$s" | cut -d' ' -f1)" > .parity-stage/MANIFEST
  cat "$g" "$s" | split -b "${PART_BYTES:-39000000}" -d - .parity-stage/part-
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    -d .parity-stage/whl gguf==0.19.0  # prepare_llm's GGUF reader, before vLLM's site (which has it) arrives
  mkdir -p "$DATA" && cp ../shared/data/trec/train.csv ../shared/data/trec/test.csv "$DATA"/
  ls -l .parity-stage .parity-stage/whl "$DATA"; cat .parity-stage/MANIFEST ;;

stage)  # there: keep the carried part; unpack the GGUF, then vLLM's site, as soon as each is whole
  mkdir -p "$STAGE" "$P/logs" "$(dirname "$GGUF")"
  cp -n .parity-stage/part-* .parity-stage/MANIFEST "$STAGE"/ 2>/dev/null
  read -r _ gsize gsha < <(grep '^gguf ' "$STAGE/MANIFEST")
  read -r _ ssize ssha < <(grep '^site ' "$STAGE/MANIFEST")
  have=$(have_bytes)
  if [ ! -f "$GGUF" ] && (( have >= gsize )); then
    (set +o pipefail; cat "$STAGE"/part-* | head -c "$gsize" > "$GGUF.partial")
    [ "$(sha256sum < "$GGUF.partial" | cut -d' ' -f1)" = "$gsha" ] && mv "$GGUF.partial" "$GGUF" || say "GGUF checksum FAILED"
  fi
  if [ ! -f "$VSITE/.installed" ] && (( have == gsize + ssize )); then
    cat "$STAGE"/part-* | tail -c +$(( gsize + 1 )) > "$STAGE/site.tar.xz"
    if [ "$(sha256sum < "$STAGE/site.tar.xz" | cut -d' ' -f1)" = "$ssha" ]; then
      mkdir -p "$VSITE" && xz -dc "$STAGE/site.tar.xz" | tar xf - -C "$VSITE" && touch "$VSITE/.installed"
    else say "site checksum FAILED"; fi
  fi
  say "staged $have of $(( gsize + ssize )) bytes; GGUF $([ -f "$GGUF" ] && echo ok || echo pending);" \
      "vLLM $([ -f "$VSITE/.installed" ] && echo installed || echo pending)" ;;

prep)  # there, once the GGUF is whole: model, adapters, every hf variant's scores
  mkdir -p "$P/logs"
  [ -f "$GGUF" ] || { say "no GGUF yet"; exit 3; }
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/psite .parity-stage/whl/*.whl
  export PYTHONPATH=/tmp/psite${PYTHONPATH:+:$PYTHONPATH}
  versions
  [ -f "$MODEL/config.json" ] || step dequantize 120 python3 -c 'import sys; from pathlib import Path; from scoring.bundled import prepare_llm
prepare_llm(Path(sys.argv[1]), gguf=Path(sys.argv[2]))' "$MODEL" "$GGUF" || exit 4
  step train 200 python3 bench/engine_parity.py train --model "$MODEL" --data "$DATA/train.csv" --n "$N_TRAIN" \
    --k "$K" --out "$P/adapters"
  step random-all 90 python3 bench/engine_parity.py random --model "$MODEL" --k "$K" --out "$P/random-all"
  step random-top 90 python3 bench/engine_parity.py random --model "$MODEL" --k "$K" --top-layers 8 --out "$P/random-top"
  compare_cmd
  step hf-scores 330 "${CMP[@]}" --only hf --timeout 310
  cp "$P/adapters/train.json" "$OUT/" 2>/dev/null
  tar czf "$OUT/prep-logs.tgz" -C "$P" logs work/progress.log work/logs work/scores 2>/dev/null  # the hf scores survive a lost machine
  say "prep done" ;;

vllm)  # there, once vLLM's site is installed: cold start + every set, warm start, the report
  [ -f "$VSITE/.installed" ] || { say "vLLM not installed yet"; exit 3; }
  # The exports of ../shared/device/env.sh (../shared is not on the GPU machine).
  export PYTHONPATH=$VSITE${PYTHONPATH:+:$PYTHONPATH}
  export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
  export VLLM_USE_FLASHINFER_SAMPLER=0        # flashinfer is not in the bundle; without this the engine fails to start
  export VLLM_WORKER_MULTIPROC_METHOD=spawn   # fork after torch CPU work hangs engine start; needs a __main__ guard
  # One compile cache for both starts, empty before the first (vLLM keeps its torch.compile, inductor
  # and triton caches under VLLM_CACHE_ROOT: vllm/compilation/compiler_interface.py).
  export VLLM_CACHE_ROOT=$P/vllm-cache
  [ -f "$P/work/start-vllm.json" ] || rm -rf "$VLLM_CACHE_ROOT"
  mkdir -p "$VLLM_CACHE_ROOT"
  versions
  compare_cmd
  step vllm-cold 330 "${CMP[@]}" --first-shard-items "$SHARD" --shard-data "$DATA/train.csv" --timeout 300
  SETS=()  # the warm start scores the checked set only (its run-to-run difference from the cold one)
  compare_cmd
  step vllm-warm 200 "${CMP[@]}" --candidate vllm@warm --first-shard-items "$SHARD" --shard-data "$DATA/train.csv" \
    --timeout 180 --out "$P/work/warm"
  step report 60 python3 bench/engine_parity.py report --work "$P/work" --check trained --out "$OUT"
  status=$?
  cp "$P/work/start-vllm.json" "$OUT/start-vllm-cold.json" 2>/dev/null
  cp "$P/work/start-vllm@warm.json" "$OUT/start-vllm-warm.json" 2>/dev/null
  du -sb "$VLLM_CACHE_ROOT" >> "$OUT/progress.log" 2>&1
  # vLLM's own account of each start (weights, torch.compile, CUDA graphs, engine init), both workers
  grep -hE "Loading weights took|Model loading took|torch.compile take|Compiling a graph|Graph capturing finished|init engine" \
    "$P"/work/logs/vllm*.log >> "$OUT/progress.log" 2>/dev/null
  tar czf "$OUT/scores.tgz" -C "$P" work/scores work/logs work/progress.log logs adapters/train.json \
    $(cd "$P" && ls -d adapters/prod_*/adapter_config.json adapters/prod_*/training.json random-*/random_*/adapter_config.json 2>/dev/null)
  say "report exit $status (0: bounds met on the trained adapters, 1: a bound failed, 3: scores missing)"
  exit $status ;;
*) echo "unknown mode $MODE"; exit 2 ;;
esac
