"""ASGI entry point: the server for SSE streams (uvicorn loopatlas.asgi:application).

Run event streams (``/runs/<id>/events``) are served by ``playground.asgi`` in front of
Django's handler, which would hold a thread per open stream; everything else is Django.
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopatlas.settings.base")

django_application = get_asgi_application()

from playground.asgi import with_event_streams  # noqa: E402  (needs the apps loaded)

application = with_event_streams(django_application)
