"""WSGI entry point (gunicorn loopatlas.wsgi) for deployments without streaming."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopatlas.settings.base")

application = get_wsgi_application()
