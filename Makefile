# The two commands a newcomer needs (see README): `make run` and `make test`.
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: setup run test lint mutation

$(STAMP): pyproject.toml
	test -x $(PY) || "$$(scripts/find-python)" -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip==25.3
	$(PY) -m pip install --quiet -e . --group dev
	touch $(STAMP)

setup: $(STAMP)

run: setup
	mkdir -p var
	DEBUG=1 $(PY) manage.py migrate --noinput
	DEBUG=1 $(PY) manage.py load_atlas
	@# The playground's worker runs beside the web server and stops with it.
	DEBUG=1 $(PY) -m celery -A workers worker -Q gpu --pool threads \
		--concurrency $${PLAYGROUND_BATCH:-8} --loglevel INFO \
		--logfile var/worker.log & worker=$$!; \
	trap 'kill $$worker 2>/dev/null; wait $$worker' EXIT INT TERM; \
	DEBUG=1 $(PY) -m uvicorn loopatlas.asgi:application --host 127.0.0.1 --port 8000 \
		--no-proxy-headers

test: setup
	$(PY) -m pytest

lint: setup
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy .

# Not part of CI: mutmut over the core modules, one at a time (see docs/development.md, "Mutation testing").
mutation: setup
	VENV=$(VENV) scripts/mutation
