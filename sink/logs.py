"""JSON-lines logs on stderr: time, level, event, and the ids that apply.

Never mail content: callers pass ids, sizes, codes of outcomes and latencies only
(no subject, body, header value, one-time code or link). ``log`` takes keyword
fields, so a reviewer can see at each call what leaves the process.

Our own lines skip the ``logging`` machinery (a record, a caller lookup that walks the
stack, a handler chain): at one line per message that was a tenth of ingest's CPU. They
are rendered here and written whole, one ``write`` and ``flush`` per line. Libraries'
records still go through ``logging``, rendered by the same function.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from typing import Any, TextIO


class _Output:
    """Where our lines go, and from which level; set once by ``setup``."""

    def __init__(self) -> None:
        # Until ``setup`` (the server's start), only warnings: an in-process Agent (the fake,
        # the tests) stays quiet, as it did when these lines went through ``logging``.
        self.level = logging.WARNING
        self.stream: TextIO = sys.stderr
        self.lock = threading.Lock()  # the store's writer thread logs too
        self._second = -1
        self._stamp = ""

    def timestamp(self, at: float) -> str:
        """RFC 3339, UTC, milliseconds; the seconds part is formatted once per second."""
        second = int(at)
        if second != self._second:
            self._second = second
            self._stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._stamp}.{int((at - second) * 1000):03d}Z"

    def write(self, line: str) -> None:
        with self.lock:
            self.stream.write(line + "\n")
            self.stream.flush()


_OUTPUT = _Output()
_LEVELS = {
    logging.DEBUG: "debug",
    logging.INFO: "info",
    logging.WARNING: "warning",
    logging.ERROR: "error",
    logging.CRITICAL: "critical",
}


def _render(at: float, level: int, event: str, fields: dict[str, Any]) -> str:
    line: dict[str, Any] = {
        "time": _OUTPUT.timestamp(at),
        "level": _LEVELS.get(level) or logging.getLevelName(level).lower(),
        "event": event,
    }
    for key, value in fields.items():
        if value is not None:
            line[key] = value
    return _ENCODER.encode(line)


# What ``json.dumps(line, default=str)`` builds for every call, built once: a third of the
# cost of a short line. Encoding keeps no state between calls, so threads may share it.
_ENCODER = json.JSONEncoder(default=str)


class JsonFormatter(logging.Formatter):
    """Libraries' records, as our lines: their logger name, never their arguments."""

    def format(self, record: logging.LogRecord) -> str:
        # A library's arguments may carry protocol lines with addresses or content.
        fields: dict[str, Any] = {"logger": record.name, "message": str(record.msg)[:200]}
        if record.exc_info and record.exc_info[0] is not None:
            fields["error"] = record.exc_info[0].__name__
        return _render(record.created, record.levelno, "library_log", fields)


def setup(level: str) -> None:
    _OUTPUT.level = logging.getLevelName(level.upper())
    _OUTPUT.stream = sys.stderr
    handler = logging.StreamHandler(sys.stderr)  # flushes after every record
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    # aiosmtpd logs every protocol line at INFO (addresses, sometimes more): errors only.
    logging.getLogger("mail.log").setLevel(logging.ERROR)


def quiet_http_server(access_logger: str, *loggers: str) -> None:
    """Send the HTTP server's own loggers through ours, and its access log nowhere.

    Access lines carry URLs, which may name runs and messages at a volume no operator reads.
    """
    logging.getLogger(access_logger).disabled = True
    for name in loggers:
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def enabled(level: int) -> bool:
    """Whether a line at ``level`` is written (skip building its fields when it is not)."""
    return level >= _OUTPUT.level


def log(event: str, level: int = logging.INFO, **fields: Any) -> None:
    if level >= _OUTPUT.level:
        _OUTPUT.write(_render(time.time(), level, event, fields))


def announce(event: str, **fields: Any) -> None:
    """A line every operator needs (where we listen, that we stopped), whatever the level."""
    _OUTPUT.write(_render(time.time(), logging.INFO, event, fields))


def warn(event: str, **fields: Any) -> None:
    log(event, logging.WARNING, **fields)


def error(event: str, **fields: Any) -> None:
    log(event, logging.ERROR, **fields)
