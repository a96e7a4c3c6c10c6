#!/usr/bin/env bash
# Issue 30's check that the GPU image can be built: pip's resolution of `.[gpu]` (what the Dockerfile
# installs with EXTRAS=gpu) must find one torch for the base dependencies and vLLM, and the CPU
# image's resolution (the CPU torch wheel, then `.`) must hold no CUDA package. Metadata only
# (`--dry-run`), in a throwaway venv with this machine's pip configuration off (no local wheels, no
# cap), as a clean Docker build sees the index. Writes bench/raw/<today>/gpu-resolution.txt
# (tests/unit/test_deploy_files.py reads the latest).
#
#   bash bench/deploy/gpu_resolution.sh      # ~2 min; TORCH_CPU_WHEEL=path to the CPU torch 2.13.0 wheel
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${WORK:-/tmp/alann-resolve}
OUT=${OUT:-bench/raw/$(date +%F)/gpu-resolution.txt}
mkdir -p "$(dirname "$OUT")"
# PyTorch's CPU index cannot be reached from the development machines; its wheel lies on their disk.
TORCH_CPU_WHEEL=${TORCH_CPU_WHEEL:-$(ls /opt/wheels/torch-2.13.0+cpu-cp311-*.whl | head -1)}
rm -rf "$WORK" && python3.11 -m venv "$WORK/venv"
clean() { env -u PIP_FIND_LINKS -u PIP_CONSTRAINT PIP_CONFIG_FILE=/dev/null "$@"; }
clean "$WORK/venv/bin/pip" install -q pip==26.3
GPU_CMD=(pip install --dry-run --ignore-installed --quiet --report "$WORK/gpu.json" '.[gpu]')
CPU_CMD=(pip install --dry-run --ignore-installed --quiet --report "$WORK/cpu.json" "$TORCH_CPU_WHEEL" .)
clean "$WORK/venv/bin/${GPU_CMD[0]}" "${GPU_CMD[@]:1}"
clean "$WORK/venv/bin/${CPU_CMD[0]}" "${CPU_CMD[@]:1}"
"$WORK/venv/bin/python" - "$WORK" "$OUT" "${GPU_CMD[*]}" "${CPU_CMD[*]}" <<'EOF'
import json, platform, subprocess, sys
from pathlib import Path

work, out, gpu_cmd, cpu_cmd = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
def installed(report: str) -> dict[str, str]:
    rows = json.loads((work / report).read_text())["install"]
    return {r["metadata"]["name"].lower(): r["metadata"]["version"] for r in rows}
def cuda(names: dict[str, str]) -> list[str]:
    return sorted(n for n in names if n.startswith(("nvidia-", "cuda-", "triton")))
def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True).stdout.strip()
gpu, cpu = installed("gpu.json"), installed("cpu.json")
pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True, text=True).stdout.split()[1]
lines = [
    f"# pip's resolution of the GPU image's install, `{gpu_cmd.replace(str(work), '$WORK')}`",
    f"# commit {git('rev-parse', 'HEAD')}{' (pyproject.toml changed since)' if git('status', '--porcelain', 'pyproject.toml') else ''}",
    f"# python {platform.python_version()} (the image's 3.11), pip {pip}, this machine's pip config off; remake: bash bench/deploy/gpu_resolution.sh",
    "",
    "key versions: " + ", ".join(f"{n} {gpu[n]}" for n in ("torch", "vllm", "transformers", "peft", "sentence-transformers", "accelerate", "triton")),
    f"CUDA packages in the GPU image: {len(cuda(gpu))}",
    f"CPU image (`{cpu_cmd.replace(str(work), '$WORK')}`): {len(cpu)} packages, torch {cpu['torch']}, CUDA packages: {cuda(cpu) or 'none'}",
    "",
    f"all {len(gpu)} packages of the GPU image:",
    *(f"{n}=={v}" for n, v in sorted(gpu.items())),
]
out.write_text("\n".join(lines) + "\n")
print("\n".join(lines[:8]))
EOF
