"""Test overrides: fast hashing, an in-memory cache, no HTTPS redirects."""

import os

os.environ.setdefault("DEBUG", "1")

from loopatlas.settings.base import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
SECURE_SSL_REDIRECT = False
