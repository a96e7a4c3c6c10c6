"""Shared fixtures: this run's own PostgreSQL test database and Redis database, model directories (no
hub), the shared data sets, artifact folders."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from tests import redis_owner
from tests.prerequisites import missing_prerequisite

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-artifacts"
REDIS_SERVER = os.environ.get("TEST_REDIS_SERVER", "redis://127.0.0.1:6379")


PG_NAME_MAX = 63  # PostgreSQL's identifier limit; a longer name is cut silently, and two runs could meet again


def run_database_name(base: str) -> str:
    """``test_<base>_<pid>_<random>``: no other run on this server (or another machine) picks it."""
    suffix = f"_{os.getpid()}_{secrets.token_hex(4)}"
    return f"test_{base}"[: PG_NAME_MAX - len(suffix)] + suffix


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix: None) -> None:
    """On PostgreSQL this run creates, uses and drops a test database of its own. Django's default,
    ``test_<name>``, is the same for every run against the server: a second run started meanwhile
    failed with "database already exists", or dropped it under the first one."""
    databases: dict[str, dict[str, Any]] = settings.DATABASES
    for db_settings in databases.values():
        if db_settings["ENGINE"] != "django.db.backends.postgresql":
            continue
        test = db_settings.setdefault("TEST", {})
        test["NAME"] = run_database_name(test.get("NAME") or str(db_settings["NAME"]))


@pytest.fixture(scope="session", autouse=True)
def owned_redis() -> Iterator[redis_owner.OwnedRedis | None]:
    """A Redis database this run claimed (empty, unused by anyone else) for the whole run: Celery in
    this process, live servers and workers all use it; it is flushed and released at the end.
    Never a fixed number, never FLUSHDB on a database the run did not claim (tests/redis_owner.py)."""
    owned = redis_owner.claim_for_run(REDIS_SERVER)
    try:
        yield owned
    finally:
        redis_owner.release_for_run()


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The prepared bundled SmolLM2 directory (``make test`` prepares it; prepared here if missing)."""
    from scoring import bundled

    out = Path(settings.LLM_DIR)
    if not bundled.is_prepared(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        bundled.prepare_llm(out)
    return out


@pytest.fixture(scope="session")
def tiny_llama_dir(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A randomly initialised 2-layer llama with SmolLM2's tokenizer and chat template: fast to run,
    same token ids, so prompts and label codes behave exactly as with the real model."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    out = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def encoder_dir() -> Path:
    from scoring import bundled

    return bundled.encoder_path()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    path = Path(settings.DATA_DIR)
    if not (path / "trec" / "train.csv").is_file():
        missing_prerequisite(f"shared data sets not found at {path} (expected ../shared/data beside the checkout)")
    return path


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
