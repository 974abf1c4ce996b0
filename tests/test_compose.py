"""docker-compose.yml parses, and every command it runs names a real entry point."""

import importlib
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import get_commands

COMPOSE = Path(settings.BASE_DIR) / "docker-compose.yml"
SERVICES = yaml.safe_load(COMPOSE.read_text())["services"]
OWN = {name: service for name, service in SERVICES.items() if "build" in service}


def test_the_stack_has_its_parts():
    assert {"postgres", "redis", "web", "worker"} <= set(SERVICES)
    assert set(OWN) >= {"web", "worker"}


@pytest.mark.parametrize("name", sorted(OWN))
def test_each_command_names_a_real_entry_point(name):
    # given
    command = OWN[name]["command"]

    # then
    program, *args = command
    if program == "uvicorn":
        module, _, attribute = args[0].partition(":")
        assert hasattr(importlib.import_module(module), attribute)
    elif program == "celery":
        assert args[:2] == ["-A", "workers"] and args[2] == "worker"
        assert importlib.import_module(args[1]).celery_app.main == "workers"
    elif program == "python":
        assert args[0] == "manage.py" and args[1] in get_commands()
    else:
        pytest.fail(f"{name} runs {program!r}, which this test does not know")


def test_the_worker_takes_the_gpu_queue_with_one_thread_per_batch_row_on_a_reserved_gpu():
    # given
    worker = SERVICES["worker"]
    command = worker["command"]

    # then
    assert command[command.index("-Q") + 1] == "gpu"
    assert command[command.index("--prefetch-multiplier") + 1] == "1"
    assert command[command.index("--pool") + 1] == "threads"  # task threads share one batch
    assert command[command.index("--concurrency") + 1] == "8"  # PLAYGROUND_BATCH's default
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]


def test_the_app_services_reach_postgres_and_redis():
    for service in OWN.values():
        environment = service["environment"]
        assert environment["DATABASE_URL"].startswith("postgres://")
        assert environment["REDIS_URL"].startswith("redis://")


def test_the_image_builds_from_the_dockerfile():
    dockerfile = (Path(settings.BASE_DIR) / "Dockerfile").read_text()
    assert "pip install ." in dockerfile
    assert all(service["build"] == "." for service in OWN.values())
