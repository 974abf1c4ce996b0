"""Test overrides: fast hashing, an in-memory cache, no HTTPS redirects."""

import os

os.environ.setdefault("DEBUG", "1")

from loopatlas.settings.base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
SECURE_SSL_REDIRECT = False

# Never publish test runs to a real broker: tests that need a worker start their own.
CELERY_BROKER_URL = "memory://"
CELERY_BROKER_TRANSPORT = None
# The playground runs the tiny random fixture checkpoint (fast on CPU) by default; the
# shipped model stays listed (it may be missing in a fresh tree).
PLAYGROUND_MODELS = {  # noqa: F405
    "ouro-tiny": BASE_DIR / "tests/kernels/fixtures/ouro-tiny",  # noqa: F405
    **PLAYGROUND_MODELS,  # noqa: F405
}
