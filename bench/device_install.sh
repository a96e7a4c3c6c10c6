#!/usr/bin/env bash
# On the GPU machine, in the repository root: collect the staged parts a call carried (.devstage/,
# built by bench/device_stage.sh) into /root/stage, and once all are there, unpack the models and
# data sets, install the carried wheels (.whl/) into /tmp/site and dequantize SmolLM2 into
# /root/models/smollm2-135m-instruct. Idempotent: safe to run in every call of a sitting.
set -uo pipefail
STAGE=/root/stage
mkdir -p "$STAGE"
[ -d .devstage ] && cp -n .devstage/* "$STAGE"/ 2>/dev/null
if [ -f /root/b/.unpacked ]; then :; elif [ -f "$STAGE/SHA256SUMS" ] && (cd "$STAGE" && sha256sum -c --quiet SHA256SUMS 2>/dev/null); then
  mkdir -p /root/b && cat "$STAGE"/part-* | xz -dc | tar xf - -C /root/b && touch /root/b/.unpacked
  echo "unpacked: $(ls /root/b/models) | data: $(ls /root/b/data | tr '\n' ' ')"
else
  echo "staged so far: $(ls "$STAGE" | tr '\n' ' ')"
  exit 3
fi
if [ -d .whl ] && [ ! -f /tmp/site/.installed ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.installed
fi
export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
if [ ! -f /root/models/smollm2-135m-instruct/config.json ]; then
  python3 -c 'import sys; from pathlib import Path; from scoring.bundled import prepare_llm; prepare_llm(Path(sys.argv[1]), gguf=next(Path("/root/b/models").glob("*.gguf")))' \
    /root/models/smollm2-135m-instruct || exit 4
fi
python3 -c 'import django, celery, torch, transformers, peft; print("django", django.__version__, "celery", celery.__version__, "torch", torch.__version__, "cuda", torch.cuda.is_available(), "transformers", transformers.__version__, "peft", peft.__version__)'
