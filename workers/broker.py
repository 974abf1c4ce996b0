"""The embedded mode's broker: kombu's SQLAlchemy transport on a SQLite file, polled
every 0.1 s instead of every second, so a submitted run starts at once.

(Its ``polling_interval`` transport option cannot be used: that transport passes every
option on to SQLAlchemy's ``create_engine``, which refuses it.)
"""

from kombu.transport.sqlalchemy import Transport as SQLAlchemyTransport


class Transport(SQLAlchemyTransport):
    polling_interval = 0.1
