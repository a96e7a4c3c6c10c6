"""Settings come from the environment; the Celery app has the queues the workers listen on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from config.settings import database_from_url

ROOT = Path(__file__).resolve().parents[2]


def test_postgres_url_becomes_a_database_entry() -> None:
    db = database_from_url("postgres://ann:s%40cret@db.example:5433/alann")
    assert (db["ENGINE"], db["NAME"], db["USER"], db["PASSWORD"], db["HOST"], db["PORT"]) == (
        "django.db.backends.postgresql",
        "alann",
        "ann",
        "s@cret",
        "db.example",
        "5433",
    )


def test_unknown_database_scheme_is_refused() -> None:
    with pytest.raises(ImproperlyConfigured, match="'mysql' is not supported"):
        database_from_url("mysql://x/y")


def _settings_in_child(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "DATABASE_URL"}}
    code = "import config.settings as s; print(s.DATABASES['default']['ENGINE'], s.DEBUG)"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**clean, **env}, capture_output=True, text=True)


def test_secret_key_is_required_outside_debug() -> None:
    result = _settings_in_child({})
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr
    assert _settings_in_child({"SECRET_KEY": "x" * 50}).returncode == 0


def test_sqlite_by_default_postgres_by_url() -> None:
    assert _settings_in_child({"DEBUG": "1"}).stdout.split()[0] == "django.db.backends.sqlite3"
    pg = _settings_in_child({"DEBUG": "1", "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/x"})
    assert pg.stdout.split()[0] == "django.db.backends.postgresql"


def test_celery_queues_and_gpu_routing() -> None:
    from config.celery import app

    assert {q.name for q in app.conf.task_queues} == {"default", "io", "gpu"}
    assert app.conf.task_acks_late is True
    assert app.conf.worker_prefetch_multiplier == 1
    assert app.amqp.router.route({}, "annotate.gpu.score_shard")["queue"].name == "gpu"
    assert app.amqp.router.route({}, "annotate.round_begin")["queue"].name == "default"
    assert app.amqp.router.route({}, "annotate.label_error_scan")["queue"].name == "default"  # embeds on the CPU
    for name in ("annotate.import_run",):  # never behind a round (issue 32, 4)
        assert app.amqp.router.route({}, name)["queue"].name == "io"


def test_default_sqlite_folder_is_created(tmp_path: Path) -> None:
    var_dir = tmp_path / "fresh" / "var"
    assert _settings_in_child({"DEBUG": "1", "VAR_DIR": str(var_dir)}).returncode == 0
    assert var_dir.is_dir()  # a fresh clone has no var/: SQLite would fail to open its file
