"""The Celery application: workers run playground generations on queue ``gpu``."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "loopatlas.settings.base")

app = Celery("workers")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
