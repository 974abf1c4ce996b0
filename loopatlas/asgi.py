"""ASGI entry point: the server for SSE streams (uvicorn loopatlas.asgi:application)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopatlas.settings.base")

application = get_asgi_application()
