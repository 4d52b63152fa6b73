"""How a worker process writes its log: ``key=value`` text lines, or one JSON object a line
(``--log-format json``) for log pipelines that index fields.

A job's lines carry its fields (``job_id``, ``task``, ``queue``, ``attempt``, ...) as the log
record's extras (see :func:`skiplock.events.log_event`): the text format shows them in the
message, the JSON format as keys of their own.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"

# The attributes every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, pid, message, the
    record's extras, and the traceback of an exception as ``exc_info``."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        line.update((k, v) for k, v in vars(record).items() if k not in _STANDARD)
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def configure(level: str, log_format: LogFormat) -> None:
    """Send the process's log to stderr at ``level``, in ``log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    handler.setFormatter(formatter)
    logging.basicConfig(level=level.upper(), handlers=[handler])
