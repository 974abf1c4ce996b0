"""The workers' broker transports: kombu's, each with one fix of ours.

``Transport``: the embedded mode's broker, kombu's SQLAlchemy transport on a SQLite
file, polled every 0.1 s instead of every second, so a submitted run starts at once.
(Its ``polling_interval`` transport option cannot be used: that transport passes every
option on to SQLAlchemy's ``create_engine``, which refuses it.)

``RedisTransport``: kombu's Redis transport, which a worker survives losing. With runs in
flight (messages delivered, not yet acknowledged) kombu 5.7 closes the lost connection's
channel twice: the first close fails on the dead socket before the channel counts as
closed, the connection then drops its transport's client, and the second close tries to
give the messages back through a new connection pool built from that client, which is
``None``: ``AttributeError: 'NoneType' object has no attribute 'hostname'`` escapes the
connection-error handling and the worker exits ("Unrecoverable error"). Here that pool
raises the connection error it stands for, which kombu ignores while closing, so the
worker reconnects once the broker is back; the runs in flight go on in their threads.
Messages not given back stay unacknowledged in Redis if it kept them, and are redelivered
after the visibility timeout to find their runs finished (``workers.execution.run_claim``).
"""

from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport.sqlalchemy import Transport as SQLAlchemyTransport
from redis.exceptions import ConnectionError as RedisConnectionError


class Transport(SQLAlchemyTransport):
    polling_interval = 0.1


class RedisChannel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection.client is None:  # the kombu connection was closed: see above
            raise RedisConnectionError("the broker connection is closed")
        return super()._connparams(asynchronous=asynchronous)  # type: ignore[misc]  # unstubbed


class RedisTransport(kombu_redis.Transport):
    Channel = RedisChannel
