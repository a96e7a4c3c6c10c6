"""`manage.py prepare_models`: the bundled GGUF becomes a plain bf16 HF directory that loads without
the GGUF quantizer, the tokenizer round-trips, a second run says "already prepared"."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

pytestmark = pytest.mark.slow


def test_prepare_models_converts_once_and_verifies(tmp_path: Path) -> None:
    out_dir = tmp_path / "smollm2"
    first = StringIO()
    call_command("prepare_models", "--out", str(out_dir), stdout=first)
    assert "LLM prepared in" in first.getvalue()
    assert "verified: LLM 135M params, encoder dim 384" in first.getvalue()
    config = json.loads((out_dir / "config.json").read_text())
    assert "quantization_config" not in config and config["dtype"] == "bfloat16"
    assert (out_dir / "model.safetensors").stat().st_size > 200_000_000  # dequantized, not Q4
    second = StringIO()
    call_command("prepare_models", "--out", str(out_dir), "--skip-verify", stdout=second)
    assert "LLM already prepared" in second.getvalue()

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    text = "Which city hosted the 1992 Summer Olympics ?"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
