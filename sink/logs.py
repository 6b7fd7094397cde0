"""JSON-lines logs on stderr: time, level, event, and the ids that apply.

Never mail content: callers pass ids, sizes, codes of outcomes and latencies only
(no subject, body, header value, one-time code or link). ``log`` takes keyword
fields, so a reviewer can see at each call what leaves the process.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

_LOGGER = logging.getLogger("runsink")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line["event"] = record.getMessage()
            line.update({k: v for k, v in fields.items() if v is not None})
        else:
            # A library's own record: keep its logger name, never its arguments (they may
            # carry protocol lines with addresses or content).
            line["event"] = "library_log"
            line["logger"] = record.name
            line["message"] = str(record.msg)[:200]
        if record.exc_info and record.exc_info[0] is not None:
            line["error"] = record.exc_info[0].__name__
        return json.dumps(line, default=str)


def setup(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)  # flushes after every record
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    _LOGGER.setLevel(level.upper())
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


def log(event: str, level: int = logging.INFO, **fields: Any) -> None:
    if _LOGGER.isEnabledFor(level):
        _LOGGER.log(level, event, extra={"fields": fields})


def announce(event: str, **fields: Any) -> None:
    """A line every operator needs (where we listen, that we stopped), whatever the level."""
    record = _LOGGER.makeRecord(
        _LOGGER.name, logging.INFO, __file__, 0, event, (), None, extra={"fields": fields}
    )
    _LOGGER.handle(record)  # past the level check on purpose


def warn(event: str, **fields: Any) -> None:
    log(event, logging.WARNING, **fields)


def error(event: str, **fields: Any) -> None:
    log(event, logging.ERROR, **fields)
