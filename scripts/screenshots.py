"""Regenerate the README's screenshots: Chromium driving the embedded stack.

    .venv/bin/python scripts/screenshots.py [--out docs/images] [--chromium /usr/bin/chromium]

Starts the stack as ``make run`` does (SQLite, the shipped models on CPU, a Celery worker
beside uvicorn) in a temporary directory on a free port, runs a prompt of each shipped
model through the playground page in a headless Chromium, and saves the run view and the
Frontier view at 1280 and 390 px wide. Nothing here is hand-made: rerun it after a change
to the pages.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WIDTHS = (1280, 390)
DRAWN = "() => [...document.querySelectorAll('.js-plotly-plot')].every(c => c.querySelector('svg'))"
DONE = "() => /^Done/.test(document.getElementById('run-status')?.textContent ?? '')"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def stack_env(var_dir: Path) -> dict[str, str]:
    """The embedded mode's environment: no DATABASE_URL, REDIS_URL or extra models."""
    kept = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "DATABASE_", "REDIS_", "CELERY_", "PLAYGROUND_"))
    }
    return kept | {"DEBUG": "1", "LOOPATLAS_VAR_DIR": str(var_dir), "PYTHONUNBUFFERED": "1"}


def start(env: dict[str, str], port: int, var_dir: Path) -> list[subprocess.Popen]:
    python = sys.executable
    for command in (["migrate", "--noinput"], ["load_atlas"]):
        subprocess.run([python, "manage.py", *command], cwd=ROOT, env=env, check=True)
    log = (var_dir / "stack.log").open("ab")
    worker = [python, "-m", "celery", "-A", "workers", "worker", "-Q", "gpu", "--pool"]
    web = [python, "-m", "uvicorn", "loopatlas.asgi:application", "--port", str(port)]
    return [
        subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log, start_new_session=True)
        for command in (worker + ["threads", "--concurrency", "4"], web)
    ]


def wait_up(base: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with urllib.request.urlopen(f"{base}/playground/", timeout=5):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def run_prompt(page, base: str, model: str, prompt: str, max_new_tokens: int) -> str:
    """Run ``prompt`` from the playground form at its model's defaults; the run's URL."""
    page.goto(f"{base}/playground/?model={model}")
    page.locator("#id_prompt").fill(prompt)
    page.locator("#id_max_new_tokens").fill(str(max_new_tokens))
    page.locator("#run-button").click()
    page.wait_for_url("**/playground/runs/*/")
    page.wait_for_function(DONE, timeout=120_000)
    return page.url


def shoot(browser, url: str, selector: str, path: Path, width: int) -> None:
    """The element ``selector`` of ``url`` at ``width`` px, Plotly drawn."""
    page = browser.new_page(viewport={"width": width, "height": 1000}, device_scale_factor=1)
    page.goto(url)
    page.wait_for_function(DRAWN)
    page.wait_for_timeout(500)  # Plotly's resize after the layout settles
    page.locator(selector).first.screenshot(path=str(path))
    page.close()
    print(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="loopatlas-shots-") as tmp:
        port, var_dir = free_port(), Path(tmp)
        base = f"http://127.0.0.1:{port}"
        processes = start(stack_env(var_dir), port, var_dir)
        try:
            wait_up(base)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=args.chromium)
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                text = run_prompt(page, base, "pydoc-loop", 'class Queue:\n    """', 48)
                task = run_prompt(page, base, "hop-loop", "ga dc fd be af eg ch hb;f3=", 2)
                frontier = f"{base}/playground/frontier/"
                for width in WIDTHS:
                    for url, selector, name in (
                        (text, "#run", "run-page"),
                        (task, "#run", "task-run"),
                        (frontier, "#frontier-1", "frontier"),
                    ):
                        shoot(browser, url, selector, args.out / f"{name}-{width}.png", width)
                browser.close()
        finally:
            for process in processes:
                os.killpg(process.pid, signal.SIGTERM)
            for process in processes:
                process.wait(timeout=30)


if __name__ == "__main__":
    main()
