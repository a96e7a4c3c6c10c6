#!/usr/bin/env bash
# Issue 30's "compose config for N=2": writes the per-GPU override for 2 GPUs
# (bench/deploy/docker-compose.gpus-2.yml; tests/unit/test_deploy_files.py keeps it equal to the
# generator's output) and what a compose client makes of docker-compose.yml plus it
# (bench/raw/<today>/compose-config-gpus-2.yml), then prints each gpu worker's device. `config` only
# parses and merges: no Docker daemon is needed (none runs on the development machines). The Docker
# CLI there has no compose plugin; Debian's docker-compose (1.29.2: apt-get install docker-compose)
# reads the same files.
#
#   bash bench/deploy/compose_config.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 config/processes.py compose --gpus 2 --out bench/deploy/docker-compose.gpus-2.yml
if docker compose version >/dev/null 2>&1; then client=(docker compose); else client=(docker-compose); fi
out=bench/raw/$(date +%F)/compose-config-gpus-2.yml  # raw outputs: bench/raw/<today>/
mkdir -p "$(dirname "$out")"
{
  echo "# \`${client[*]} -f docker-compose.yml -f bench/deploy/docker-compose.gpus-2.yml config\`, SECRET_KEY=x"
  echo "# $("${client[@]}" version | head -1), commit $(git rev-parse --short HEAD); paths shown relative"
  env -i PATH="$PATH" HOME="$HOME" SECRET_KEY=x \
    "${client[@]}" -f docker-compose.yml -f bench/deploy/docker-compose.gpus-2.yml config | sed "s|$PWD|.|g"
} > "$out"
python3 - "$out" <<'EOF'
import sys

import yaml

services = yaml.safe_load(open(sys.argv[1]))["services"]
for name, service in sorted(services.items()):
    if name.startswith("gpu-worker"):
        devices = service["deploy"]["resources"]["reservations"]["devices"]
        print(name, "device_ids", [i for d in devices for i in d["device_ids"]], "|", service["command"])
EOF
