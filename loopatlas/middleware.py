"""A service the site depends on being down is a 503 that says so, never a 500.

PostgreSQL restarting: the request fails with a connection error, answers 503, and the
next one connects afresh (``CONN_HEALTH_CHECKS`` drops a dead persistent connection), so
the site recovers by itself. Redis (the Celery broker and the run streams) down: what
needs it, submitting a playground run, answers 503; the cache does not need it (it fails
open, ``loopatlas/cache.py``). Any other database error, say a query the database
refuses while its connection stays healthy, is a bug and stays a 500.
"""

import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from loopatlas.api.errors import is_api
from loopatlas.outage import DATABASE_ERRORS, database_unreachable

logger = logging.getLogger(__name__)

RETRY_AFTER_S = 5
DATABASE_DOWN = "The database is unavailable (restarting?); retry in a few seconds."
REDIS_DOWN = "The run queue (Redis) is unavailable; retry in a few seconds."


def service_unavailable(request: HttpRequest, message: str) -> HttpResponse:
    """A 503 naming the service, JSON under ``/api/`` (the API's error shape), else text."""
    if is_api(request):
        response: HttpResponse = JsonResponse({"detail": message}, status=503)
    else:
        response = HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


class ServiceUnavailableMiddleware(MiddlewareMixin):
    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if isinstance(exc, DATABASE_ERRORS) and database_unreachable():
            message = DATABASE_DOWN
        elif isinstance(exc, (RedisConnectionError, RedisTimeoutError, BrokerError)):
            message = REDIS_DOWN
        else:
            return None
        logger.warning("%s %s: 503, %s (%s)", request.method, request.path, message, exc)
        return service_unavailable(request, message)
