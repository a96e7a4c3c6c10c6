"""Turn the bundled GGUF into a local HF directory and locate the bundled encoder; then load both
to prove they work. Idempotent: a second run says "already prepared"."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from scoring import bundled


class Command(BaseCommand):
    help = "Prepare the bundled SmolLM2-135M-Instruct (GGUF -> bf16 HF dir) and locate all-MiniLM-L6-v2."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--out", default=str(settings.LLM_DIR), help="target HF directory for the LLM")
        parser.add_argument("--skip-verify", action="store_true", help="do not load the models afterwards")

    def handle(self, *args: Any, **opts: Any) -> None:
        out = Path(opts["out"])
        out.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            created = bundled.prepare_llm(out, log=self.stdout.write)
            encoder = bundled.encoder_path(settings.ENCODER_DIR or None)
        except bundled.BundledModelMissing as exc:
            raise CommandError(str(exc)) from exc
        if created:
            self.stdout.write(self.style.SUCCESS(f"LLM prepared in {out} ({time.monotonic() - started:.0f}s)"))
        else:
            self.stdout.write(f"LLM already prepared: {out}")
        self.stdout.write(f"encoder: {encoder}")
        if not opts["skip_verify"]:
            self._verify(out, encoder)

    def _verify(self, llm_dir: Path, encoder_dir: Path) -> None:
        from sentence_transformers import SentenceTransformer
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(llm_dir)
        model = AutoModelForCausalLM.from_pretrained(llm_dir)
        text = "What is the capital of France?"
        if tokenizer.decode(tokenizer(text)["input_ids"]) != text:
            raise CommandError(f"tokenizer in {llm_dir} does not round-trip")
        n_params = sum(p.numel() for p in model.parameters())
        dim = SentenceTransformer(str(encoder_dir), device="cpu").get_embedding_dimension()
        self.stdout.write(self.style.SUCCESS(f"verified: LLM {n_params / 1e6:.0f}M params, encoder dim {dim}"))
