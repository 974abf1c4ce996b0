"""docker-compose.yml parses, every command it runs names a real entry point, and the
stack keeps its production posture: TLS at the proxy, secrets from the environment,
bounded Redis, and `check --deploy` clean under its settings. (No Docker engine runs
here: the file itself is what is checked.)"""

import importlib
import re
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.core.management import get_commands

from tests.loopatlas.test_settings import check_deploy
from tests.playground.stack import database_url_of

ROOT = Path(settings.BASE_DIR)
COMPOSE = ROOT / "docker-compose.yml"
SERVICES = yaml.safe_load(COMPOSE.read_text())["services"]
OWN = {name: service for name, service in SERVICES.items() if "build" in service}
APP_ENV = OWN["web"]["environment"]
CADDYFILE = (ROOT / "deploy" / "Caddyfile").read_text()
ENV_EXAMPLE = dict(
    line.split("=", 1)
    for line in (ROOT / ".env.example").read_text().splitlines()
    if line and not line.startswith("#")
)
REFERENCE = re.compile(r"\$\{(\w+)(?::([?-])([^}]*))?\}")


def resolve(value: str, env: dict[str, str]) -> str:
    """Compose's interpolation: ${NAME}, ${NAME:-default}, ${NAME:?error}."""

    def one(match: re.Match[str]) -> str:
        name, kind, rest = match.groups()
        if env.get(name):
            return env[name]
        if kind == "?":
            raise KeyError(f"{name}: {rest}")
        return rest if kind == "-" else ""

    return REFERENCE.sub(one, value)


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


def test_the_proxy_is_the_only_published_service_and_forwards_to_uvicorn() -> None:
    # then only the proxy publishes ports, and uvicorn listens on the compose network
    assert [name for name, service in SERVICES.items() if "ports" in service] == ["proxy"]
    command = SERVICES["web"]["command"]
    port = command[command.index("--port") + 1]
    assert SERVICES["web"]["expose"] == [port]
    assert f"reverse_proxy web:{port}" in CADDYFILE
    assert "./deploy/Caddyfile:/etc/caddy/Caddyfile:ro" in SERVICES["proxy"]["volumes"]


def test_the_proxy_serves_the_collected_static_files() -> None:
    # given the volume the static service collects into (STATIC_ROOT in the image)
    image_root = Path("/app") / Path(settings.STATIC_ROOT).relative_to(ROOT)
    assert f"static:{image_root}" in SERVICES["static"]["volumes"]
    assert SERVICES["static"]["command"][2:4] == ["collectstatic", "--noinput"]
    # then Caddy mounts it and serves STATIC_URL from it
    assert "static:/srv/static:ro" in SERVICES["proxy"]["volumes"]
    assert f"handle_path {settings.STATIC_URL}*" in CADDYFILE
    assert "root * /srv/static" in CADDYFILE


def test_tls_posture_is_on_and_forwarded_headers_come_from_the_one_proxy() -> None:
    for name in ("DEBUG", "SECURE_SSL_REDIRECT", "SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE"):
        assert APP_ENV[name] == ("0" if name == "DEBUG" else "1"), name
    assert APP_ENV["BEHIND_TLS_PROXY"] == "1" and APP_ENV["NUM_PROXIES"] == "1"
    # and uvicorn leaves the forwarded address to Django (NUM_PROXIES), never rewriting it
    assert "--no-proxy-headers" in SERVICES["web"]["command"]
    assert all(service["environment"] == APP_ENV for service in OWN.values())


def test_no_secret_is_written_in_the_file() -> None:
    # then every secret is a required reference to the environment
    for name, service in SERVICES.items():
        for key, value in (service.get("environment") or {}).items():
            if re.search("SECRET|PASSWORD", key):
                assert re.fullmatch(r"\$\{\w+:\?[^}]+\}", value), f"{name}: {key}={value}"
    password = re.match(r"postgres://\w+:(.*)@", APP_ENV["DATABASE_URL"])
    assert password and password[1] == "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
    # and .env.example names every variable the file reads, with no secret filled in
    assert {name for name, _, _ in REFERENCE.findall(COMPOSE.read_text())} <= set(ENV_EXAMPLE)
    assert ENV_EXAMPLE["SECRET_KEY"] == "" and ENV_EXAMPLE["POSTGRES_PASSWORD"] == ""
    assert ".env" in (ROOT / ".gitignore").read_text().splitlines()


def test_redis_is_bounded_and_evicts_only_what_expires() -> None:
    command = SERVICES["redis"]["command"]
    assert resolve(command[command.index("--maxmemory") + 1], ENV_EXAMPLE) == "256mb"
    # the broker's queues have no TTL: a volatile policy never evicts a queued run
    assert command[command.index("--maxmemory-policy") + 1] == "volatile-lru"


def test_check_deploy_is_clean_under_the_compose_settings(tmp_path: Path) -> None:
    # given the app's environment as compose resolves it from a filled-in .env
    env = ENV_EXAMPLE | {
        "SECRET_KEY": "k3y-" + "0123456789abcdefghijklmnopqrstuvwxyzABCDEF!@#%^&*(-_=+)",
        "POSTGRES_PASSWORD": "pw",
    }
    resolved = {key: resolve(str(value), env) for key, value in APP_ENV.items()}
    # the checks read the database; compose's host exists only on its network
    if settings.USING_POSTGRES:
        resolved["DATABASE_URL"] = database_url_of(settings.DATABASES["default"])
    else:
        resolved["DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite3'}"
    # when
    result = check_deploy(resolved)
    # then
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout
