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
import re
import sys
import threading
import time
from datetime import UTC, datetime
from typing import Any, Literal

import orjson

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


_stamp: tuple[int, str] = (-1, "")  # one object, so a thread never pairs a second with another's text


def _timestamp(created: float) -> str:
    """``created`` as ISO 8601 in UTC to the millisecond; the date and time of day are formatted
    once per second (a busy server writes many lines a second)."""
    global _stamp
    milliseconds = int(created * 1000)
    second, text = _stamp
    if second != milliseconds // 1000:
        second = milliseconds // 1000
        text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _stamp = (second, text)
    return f"{text}.{milliseconds % 1000:03d}+00:00"


class LineFormatter(logging.Formatter):
    """A line from its parts: a record's, or a request line's given directly (:func:`log_request`)."""

    def format(self, record: logging.LogRecord) -> str:
        error = self.formatException(record.exc_info) if record.exc_info else None
        return self.line(
            record.created, record.levelname, record.name, record.getMessage(), _fields(record), error
        )

    def line(
        self, created: float, level: str, logger: str, message: str, fields: dict[str, Any], error: str | None
    ) -> str:
        raise NotImplementedError


def _json_default(value: Any) -> str:
    return str(value)


class JsonFormatter(LineFormatter):
    """One JSON object per line: time, level, logger, message, then the line's fields."""

    def line(
        self, created: float, level: str, logger: str, message: str, fields: dict[str, Any], error: str | None
    ) -> str:
        line: dict[str, Any] = {
            "time": _timestamp(created),
            "level": level.lower(),
            "logger": logger,
            "message": message,
        }
        for key, value in fields.items():
            if value is not None:
                line[key] = value
        if error is not None:
            line["error"] = error
        try:
            return orjson.dumps(line, default=_json_default).decode()
        except (orjson.JSONEncodeError, TypeError):  # an integer beyond 64 bits, a key not a string
            # ASCII: orjson also refuses a lone surrogate, which has no UTF-8 form to write.
            return json.dumps(line, ensure_ascii=True, separators=(",", ":"), default=str)


# What a text line may not carry raw: control characters (C0, DEL, C1), Unicode line and paragraph
# separators, lone surrogates (no UTF-8 form). A client's input (a path, a JWT's sub) can hold any.
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# A value written bare: no space, quote, equals sign or backslash (else it is quoted).
_BARE = re.compile(r'[^\s"=\\]+')


def _escape_character(match: re.Match[str]) -> str:
    character = match.group()
    named = _NAMED_ESCAPES.get(character)
    if named is not None:
        return named
    code = ord(character)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _escaped(text: str) -> str:
    """``text`` with each unsafe character as an escape (``\\n``, ``\\x1b``, ``\\ud800``)."""
    return _UNSAFE.sub(_escape_character, text)


def _text_value(value: Any) -> str:
    """A field's value as text: bare when unambiguous, else double-quoted with ``\\`` and ``"``
    escaped, so a value can neither end its line nor pass for another ``key=value``."""
    text = str(value)
    if _BARE.fullmatch(text) and not _UNSAFE.search(text):
        return text
    return '"' + _escaped(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


class TextFormatter(LineFormatter):
    """``time LEVEL logger: message key=value ...`` for a person at a terminal.

    One record is one line, whatever its parts hold (:func:`_escaped`); a traceback follows on
    lines of its own, each indented, so no line that starts at column 0 is anything but a record's
    own."""

    def line(
        self, created: float, level: str, logger: str, message: str, fields: dict[str, Any], error: str | None
    ) -> str:
        text = f"{_timestamp(created)} {level:<7} {logger}: {_escaped(message)}"
        pairs = [
            f"{_escaped(str(key))}={_text_value(value)}" for key, value in fields.items() if value is not None
        ]
        if pairs:
            text += " " + " ".join(pairs)
        if error is not None:
            text += "".join("\n  " + _escaped(part) for part in error.splitlines())
        return text


FLUSH_SECONDS = 0.1


class BatchingStreamHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes a warning or worse at once and everything else within
    :data:`FLUSH_SECONDS`, so a busy server pays neither a write system call nor the stream's
    encoding per request line: lines wait in a list and go out joined, in one write.

    One daemon thread per handler does the deferred writes; ``logging.shutdown`` (at exit) flushes
    whatever is still waiting.
    """

    def __init__(self, stream: Any = None) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._pending = threading.Event()
        self._flusher: threading.Thread | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.add_line(line, urgent=record.levelno >= logging.WARNING)

    def add_line(self, line: str, *, urgent: bool = False) -> None:
        """Queue ``line`` (written by the flusher), or write it and all before it now (``urgent``).
        The caller holds the handler's lock (``Handler.handle`` does)."""
        self._lines.append(line)
        if urgent:
            self.flush()
            return
        if self._flusher is None:
            self._flusher = threading.Thread(target=self._flush_soon, name="catalog-log-flush", daemon=True)
            self._flusher.start()
        if not self._pending.is_set():  # set() takes the event's lock: once per flush, not per line
            self._pending.set()

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            if self._lines:
                lines, self._lines = self._lines, []
                try:
                    self.stream.write(self.terminator.join(lines) + self.terminator)
                except Exception:
                    return  # nowhere to report it: the stream itself is what failed
            super().flush()

    def _flush_soon(self) -> None:
        while True:
            self._pending.wait()
            # Lines written in the meantime join this flush: one system call for all of them.
            time.sleep(FLUSH_SECONDS)
            self._pending.clear()
            self.flush()


def logging_config(log_format: LogFormat | None = None, *, stream: str = "stdout") -> dict[str, Any]:
    """uvicorn's ``log_config``: everything to stdout (``catalog stdio``: stderr, stdout is its
    protocol) in one format; uvicorn's access log silent.

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
        "stream": f"ext://sys.{stream}",
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


def _request_line_handler(level: int) -> BatchingStreamHandler | None:
    """The one handler a request line at ``level`` would reach, when nothing else would see its
    record (no filter, no other handler, one of catalog's formatters): the shipped configuration.
    The line is then written without a log record (the logging module's record, handler and lock
    calls were a tenth of a plain read's CPU). None: the line goes through the logging module."""
    if not REQUEST_LOGGER.isEnabledFor(level):
        return None
    logger: logging.Logger | None = REQUEST_LOGGER
    while logger is not None:
        if logger.filters:
            return None
        if logger.handlers:
            handler = logger.handlers[0]
            shipped = (
                len(logger.handlers) == 1
                and not logger.propagate
                and type(handler) is BatchingStreamHandler
                and not handler.filters
                and level >= handler.level
                and isinstance(handler.formatter, LineFormatter)
            )
            return handler if shipped else None  # type: ignore[return-value]
        if not logger.propagate:
            return None
        logger = logger.parent
    return None


def log_request(fields: dict[str, Any], status: int) -> None:
    message = f"{fields.get('method')} {fields.get('route')} {status}"
    level = logging.WARNING if status >= 500 else logging.INFO
    handler = _request_line_handler(level)
    if handler is None:
        REQUEST_LOGGER.log(level, message, extra={FIELDS_ATTRIBUTE: fields})
        return
    formatter: LineFormatter = handler.formatter  # type: ignore[assignment]
    line = formatter.line(
        time.time(), logging.getLevelName(level), REQUEST_LOGGER.name, message, fields, None
    )
    with handler.lock:  # type: ignore[union-attr]
        handler.add_line(line, urgent=level >= logging.WARNING)


def log_event(logger: logging.Logger, message: str, level: int = logging.INFO, **fields: Any) -> None:
    """A significant event as one line with structured fields (an import's summary, a dropped
    consumer): the same shape as the request lines."""
    logger.log(level, message, extra={FIELDS_ATTRIBUTE: fields})
