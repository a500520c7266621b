"""Structured logs: one line per request and per significant event, as JSON or as text.

``CATALOG_LOG_FORMAT`` is ``json`` or ``text``; unset, it is JSON unless stdout is a terminal. The
server's logging (uvicorn's own loggers, ``catalog.*``, the SDK's) is configured once per process
through uvicorn's ``log_config`` (:func:`logging_config`), and uvicorn's access log is off: the
request line is :func:`log_request`'s, written by :mod:`catalog.observability.middleware` once the
response has ended, with what the app learned about the request (route template, MCP method and
era, tenant, principal, JSON-RPC code).

A line never holds a secret: the principal is its label (``token:12``, ``jwt:<subject>``,
``platform-admin``), never a credential, and the request line has no query string (a misplaced
``?access_token=`` would otherwise be logged).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any, Literal

from catalog.observability.context import current_request

LogFormat = Literal["json", "text"]

REQUEST_LOGGER = logging.getLogger("catalog.request")
FIELDS_ATTRIBUTE = "catalog"  # ``extra={"catalog": {...}}``: the structured fields of a line


def default_format() -> LogFormat:
    return "text" if sys.stdout.isatty() else "json"


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = dict(getattr(record, FIELDS_ATTRIBUTE, None) or {})
    if "request_id" not in fields:
        request = current_request.get()
        if request is not None:  # a line written while serving a request names it
            fields["request_id"] = request.request_id
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, then the line's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in _fields(record).items():
            if value is not None:
                line[key] = value
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message key=value ...`` for a person at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        text = f"{stamp} {record.levelname:<7} {record.name}: {record.getMessage()}"
        pairs = [f"{key}={value}" for key, value in _fields(record).items() if value is not None]
        if pairs:
            text += " " + " ".join(pairs)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


FLUSH_SECONDS = 0.1


class BatchingStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that flushes a warning or worse at once and everything else within
    :data:`FLUSH_SECONDS`, so a busy server does not pay a write system call per request line.

    One daemon thread per handler does the deferred flushes; ``logging.shutdown`` (at exit) flushes
    whatever is still buffered.
    """

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._pending = threading.Event()
        self._flusher: threading.Thread | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record) + self.terminator)
        except Exception:
            self.handleError(record)
            return
        if record.levelno >= logging.WARNING:
            self.flush()
            return
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_soon, name="catalog-log-flush", daemon=True)
            self._flusher.start()
        if not self._pending.is_set():  # set() takes the event's lock: once per flush, not per line
            self._pending.set()

    def _flush_soon(self) -> None:
        while True:
            self._pending.wait()
            # Lines written in the meantime join this flush: one system call for all of them.
            time.sleep(FLUSH_SECONDS)
            self._pending.clear()
            self.flush()


def logging_config(log_format: LogFormat | None = None) -> dict[str, Any]:
    """uvicorn's ``log_config``: everything to stdout in one format; uvicorn's access log silent.

    No line names its thread, process or source line, so records skip looking them up (the logging
    module's documented optimisations: a record is made per request)."""
    logging._srcfile = None  # no stack walk to find the caller of each log call
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    formatter = JsonFormatter if (log_format or default_format()) == "json" else TextFormatter
    handler = {
        "class": f"{BatchingStreamHandler.__module__}.{BatchingStreamHandler.__qualname__}",
        "formatter": "catalog",
        "stream": "ext://sys.stdout",
    }
    quiet = {"handlers": [], "level": "WARNING", "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"catalog": {"()": f"{formatter.__module__}.{formatter.__qualname__}"}},
        "handlers": {"default": handler},
        "loggers": {
            "uvicorn": {"handlers": ["default"], "level": "INFO", "propagate": False},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": quiet,  # replaced by catalog.request, never both
            "catalog": {"handlers": ["default"], "level": "INFO", "propagate": False},
        },
        "root": {"handlers": ["default"], "level": "WARNING"},
    }


def log_request(fields: dict[str, Any], status: int) -> None:
    message = f"{fields.get('method')} {fields.get('route')} {status}"
    level = logging.WARNING if status >= 500 else logging.INFO
    REQUEST_LOGGER.log(level, message, extra={FIELDS_ATTRIBUTE: fields})


def log_event(logger: logging.Logger, message: str, level: int = logging.INFO, **fields: Any) -> None:
    """A significant event as one line with structured fields (an import's summary, a dropped
    consumer): the same shape as the request lines."""
    logger.log(level, message, extra={FIELDS_ATTRIBUTE: fields})
