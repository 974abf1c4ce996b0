"""Settings for every environment; differences come from environment variables.

Variables (all optional on the embedded default):
    DEBUG          1 for local development. Off by default: production-safe.
    SECRET_KEY     required when DEBUG is off.
    ALLOWED_HOSTS  comma-separated host names (default: localhost only).
    DATABASE_URL   e.g. postgres://user@host:5432/db (default: SQLite file var/db.sqlite3).
    REDIS_URL      e.g. redis://127.0.0.1:6379/0: Celery broker, run streams and cache.
                   Unset means the embedded mode: no Redis anywhere (the broker is a
                   SQLite file under var/, and run events flow through the database).
    PLAYGROUND_MODELS      extra checkpoints, ``name=path`` pairs separated by commas; the
                           shipped ``pydoc-loop`` (the default) and ``hop-loop`` come first
                           unless renamed.
    PLAYGROUND_MAX_QUEUED  runs queued or running at once before submits get 429 (8).
    PLAYGROUND_VISITOR_ACTIVE / _SUBMITS / _STREAMS  per-visitor limits (2, 12/minute, 20).
    NUM_PROXIES    reverse proxies in front that append to X-Forwarded-For (default 0:
                   the header is ignored and the peer address identifies a client).
"""

from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.csp import CSP

from loopatlas.settings.env import env_bool, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(env_str("LOOPATLAS_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    SECRET_KEY = "insecure-development-key-only-for-debug"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "servestatic",  # its configuration checks
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "atlas",
    "playground",
    "workers",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "loopatlas.middleware.ServiceUnavailableMiddleware",
    "django.middleware.csp.ContentSecurityPolicyMiddleware",
    # Async-capable (WhiteNoise is sync-only, and one sync middleware puts every request,
    # each open event stream included, on a thread of its own).
    "servestatic.middleware.ServeStaticMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "loopatlas.urls"
ASGI_APPLICATION = "loopatlas.asgi.application"
WSGI_APPLICATION = "loopatlas.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.csp",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'db.sqlite3'}"),
        conn_max_age=env_int("DB_CONN_MAX_AGE", 0),
        conn_health_checks=True,  # a connection the server dropped (restart) is replaced
    )
}
USING_POSTGRES = DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web process reads while the embedded worker writes: WAL lets readers go on
    # during a write, and IMMEDIATE transactions wait for the lock instead of failing.
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }
    # Explore's covering index (atlas.Work) is a PostgreSQL read path; SQLite keeps its
    # key columns as a plain index, which is all it needs.
    SILENCED_SYSTEM_CHECKS = ["models.W040"]
if USING_POSTGRES:
    INSTALLED_APPS.append("django.contrib.postgres")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")

if REDIS_URL:
    # Fails open (loopatlas/cache.py): with Redis down, reads are computed uncached and
    # throttles let requests through, with a logged warning; short timeouts so a hung
    # server does not hold requests.
    CACHES = {
        "default": {
            "BACKEND": "loopatlas.cache.FailOpenRedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 1.0},
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": (
            "django.contrib.staticfiles.storage.StaticFilesStorage"
            if DEBUG
            else "servestatic.storage.CompressedManifestStaticFilesStorage"
        )
    },
}
# Serve straight from STATICFILES_DIRS when collectstatic has not run (development, tests).
SERVESTATIC_USE_FINDERS = DEBUG

# Production-safe defaults when DEBUG is off; each can still be relaxed by its variable.
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
# HSTS once TLS is on: a year by default (what `check --deploy` asks for), 0 turns it off.
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31_536_000 if SECURE_SSL_REDIRECT else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
# Only a TLS-terminating proxy in front may say the request came over HTTPS (the compose
# stack's proxy sets this header itself); without one, anybody could send it.
if env_bool("BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy: code and stylesheets come from this site only. Pages hand data
# to their modules through json_script (not executed), so no inline script exists; the
# API docs load their init script from a URL (SpectacularSwaggerSplitView). Style
# *attributes* stay allowed: templates set CSS variables with them and Plotly draws with
# them; an attribute cannot run code. The favicon is a data: URL.
SECURE_CSP = {
    "default-src": [CSP.SELF],
    "script-src": [CSP.SELF],
    "style-src": [CSP.SELF],
    "style-src-attr": [CSP.UNSAFE_INLINE],
    "img-src": [CSP.SELF, "data:"],
    "connect-src": [CSP.SELF],
    "object-src": [CSP.NONE],
    "base-uri": [CSP.NONE],
    "form-action": [CSP.SELF],
    "frame-ancestors": [CSP.NONE],
}

NUM_PROXIES = env_int("NUM_PROXIES", 0)
if NUM_PROXIES < 0:
    raise ImproperlyConfigured(f"NUM_PROXIES={NUM_PROXIES} is negative")

# The API's shared conventions are in loopatlas/api/conventions.py.
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["loopatlas.api.conventions.StrictFilterBackend"],
    "DEFAULT_PAGINATION_CLASS": "loopatlas.api.conventions.PageNumberPagination",
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "loopatlas.api.conventions.FormatNegotiation",
    "EXCEPTION_HANDLER": "loopatlas.api.conventions.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    # JSON bodies only (bounded, loopatlas/api/parsers.py): the pages' forms post to
    # their own views, and one body format keeps the schema exact.
    "DEFAULT_PARSER_CLASSES": ["loopatlas.api.parsers.JSONParser"],
    "DEFAULT_AUTHENTICATION_CLASSES": ["rest_framework.authentication.SessionAuthentication"],
    # Anonymous writes and heavy exports are limited per address; reads are not.
    "DEFAULT_THROTTLE_RATES": {
        "suggestions": env_str("THROTTLE_SUGGESTIONS", "10/hour"),
        "proposals": env_str("THROTTLE_PROPOSALS", "5/hour"),
        "exports": env_str("THROTTLE_EXPORTS", "120/minute"),
        "admin_login": env_str("THROTTLE_ADMIN_LOGIN", "10/hour"),
        "playground_submits": env_str("PLAYGROUND_VISITOR_SUBMITS", "12/minute"),
    },
    # How many proxies of the operator's sit in front (0: none, so X-Forwarded-For is a
    # header like any other). DRF's None would trust the header, letting a client pick
    # its own address and reset every per-address limit.
    "NUM_PROXIES": NUM_PROXIES,
}

# Reads keep their data in the cache under their ETag (which names the data version),
# so nothing cached goes stale; this only bounds how long unused entries stay.
API_CACHE_SECONDS = env_int("API_CACHE_SECONDS", 3600)
# Explore's aggregates per data version and search (atlas/explore.py); same reasoning.
EXPLORE_CACHE_SECONDS = env_int("EXPLORE_CACHE_SECONDS", 3600)
# Whole-atlas exports, written once per data version (atlas/exportstore.py).
EXPORT_STORE_DIR = Path(env_str("EXPORT_STORE_DIR", str(VAR_DIR / "exports")))
EXPORT_STORE_FILES = env_int("EXPORT_STORE_FILES", 64)

SPECTACULAR_SETTINGS = {
    "TITLE": "Loop Atlas API",
    "DESCRIPTION": "The atlas of looped Transformers and the playground's runs, as data.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No deep links: they put a link inside each operation's toggle button (nested
    # interactive controls, which screen readers cannot reach).
    "SWAGGER_UI_SETTINGS": {"deepLinking": False},
    # Request bodies get components of their own, so they state what a write requires
    # (a non-blank prompt: minLength 1) apart from what a read returns.
    "COMPONENT_SPLIT_REQUEST": True,
    # Two models have a "status": each enum keeps a name of its own (runs' the one it had).
    "ENUM_NAME_OVERRIDES": {
        "StatusEnum": "playground.models.Run.Status",
        "ProposalStatusEnum": "atlas.models.Proposal.Status",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "atlas.api.schema.schema_atlas_bounds",  # vocabularies and slugs from the database
    ],
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
}

# Celery: Redis is the broker in the full stack. The embedded mode needs no server: its
# broker is a SQLite file (kombu's SQLAlchemy transport, workers/broker.py) shared by the
# web process and the worker that `make run` starts beside it.
CELERY_BROKER_URL = env_str(
    "CELERY_BROKER_URL", REDIS_URL or f"sqlite:///{VAR_DIR / 'celery-broker.sqlite3'}"
)
# Our subclasses of kombu's transports (workers/broker.py): the SQLite file polled fast,
# and Redis (plain or TLS) that a worker survives losing with runs in flight.
CELERY_BROKER_TRANSPORT: str | None = (
    "workers.broker:Transport"
    if CELERY_BROKER_URL.startswith("sqlite:")
    else "workers.broker:RedisTransport"
    if CELERY_BROKER_URL.startswith(("redis:", "rediss:"))
    else None
)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ROUTES = {"workers.tasks.*": {"queue": "gpu"}}
# Generations are long: a worker takes one at a time and acknowledges it only once done.
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ACKS_LATE = True
# A worker that loses the broker lets its runs in flight finish (their tokens go to the
# database), not cancels them (Celery 6's default): a redelivered message would only fail
# a run it finds started (workers.execution.run_claim).
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
CELERY_WORKER_SEND_TASK_EVENTS = False
# A worker's task threads keep their database connections between runs, for up to this
# many seconds (``workers.tasks``), so a run's claim does not wait for a new connection;
# Celery's own closing after every task is then held off (it closes only once every
# 2 x CELERY_DB_REUSE_MAX tasks). The web process keeps DB_CONN_MAX_AGE (0): under ASGI
# each request runs in a context of its own, so a kept connection would never be reused.
WORKER_DB_CONN_MAX_AGE = env_int("WORKER_DB_CONN_MAX_AGE", 300)
CELERY_DB_REUSE_MAX = 1000


def _playground_models(raw: str) -> dict[str, Path]:
    shipped = BASE_DIR / "kernels" / "models"
    models = {"pydoc-loop": shipped / "pydoc-loop", "hop-loop": shipped / "hop-loop"}
    for pair in filter(None, (item.strip() for item in raw.split(","))):
        name, sep, path = pair.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ImproperlyConfigured(f"PLAYGROUND_MODELS: {pair!r} is not name=path")
        models[name.strip()] = Path(path.strip()).expanduser()
    return models


# Playground: checkpoints by name (the first is the default). A missing directory is
# listed as unavailable and refused at submit; it never breaks startup.
PLAYGROUND_MODELS = _playground_models(env_str("PLAYGROUND_MODELS"))
PLAYGROUND_MAX_QUEUED = env_int("PLAYGROUND_MAX_QUEUED", 8)
# Per visitor (playground.visitors): runs queued or running, and open event streams per
# address (the submit rate per address is the throttle rate "playground_submits" above).
PLAYGROUND_VISITOR_ACTIVE = env_int("PLAYGROUND_VISITOR_ACTIVE", 2)
PLAYGROUND_VISITOR_STREAMS = env_int("PLAYGROUND_VISITOR_STREAMS", 20)
# A running run whose worker has not written a heartbeat for this long is marked failed.
PLAYGROUND_STALE_AFTER_S = env_int("PLAYGROUND_STALE_AFTER_S", 60)
# How often each worker fails such runs (workers.sweep), with no viewer or submit needed.
PLAYGROUND_STALE_SWEEP_S = float(env_str("PLAYGROUND_STALE_SWEEP_S", "5") or 5)
# A queued run no worker has taken for this long is failed (no worker on queue gpu?), so
# the queue never stays full of runs nobody will run.
PLAYGROUND_QUEUED_TIMEOUT_S = env_int("PLAYGROUND_QUEUED_TIMEOUT_S", 900)
# Soft/hard time limits of one generation (the soft one fails the run with a reason).
PLAYGROUND_SOFT_TIME_LIMIT_S = env_int("PLAYGROUND_SOFT_TIME_LIMIT_S", 600)
PLAYGROUND_HARD_TIME_LIMIT_S = env_int("PLAYGROUND_HARD_TIME_LIMIT_S", 660)
# SSE: a ``: ping`` comment after this many quiet seconds (and a look for a dead worker).
PLAYGROUND_SSE_HEARTBEAT_S = float(env_str("PLAYGROUND_SSE_HEARTBEAT_S", "10") or 10)
# How long a finished run's Redis stream is kept (its tokens stay in the database).
PLAYGROUND_STREAM_TTL_S = env_int("PLAYGROUND_STREAM_TTL_S", 3600)
# Intra-op threads of torch in each worker process (0 = torch's default, one per core). A
# CPU worker that shares its cores with the web server, or with other workers, runs faster
# on one: a second thread that loses its core stalls every barrier.
PLAYGROUND_TORCH_THREADS = env_int("PLAYGROUND_TORCH_THREADS", 1)
# Runs one worker process decodes together in one batch per model (workers.batching); the
# worker runs as many task threads (``--pool threads --concurrency`` the same number).
PLAYGROUND_BATCH = env_int("PLAYGROUND_BATCH", 8)
# Prompt position-loops a joining run prefills per batch step (one loop of a chunk of this
# many positions, or every loop of a short prompt), so a long prompt delays the runs
# already decoding by about one step at a time.
PLAYGROUND_PREFILL_CHUNK = env_int("PLAYGROUND_PREFILL_CHUNK", 32)
# Pause after each generated token (seconds; 0 = none): slows demos and lets tests catch
# a run mid-flight.
PLAYGROUND_TOKEN_DELAY_S = float(env_str("PLAYGROUND_TOKEN_DELAY_S", "0") or 0)
