"""Log output: plain text for people, one JSON object per line for log pipelines, and secrets
kept out of both (a bearer token or a password in a URL must never reach a log line)."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime

_SECRETS = [
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1[redacted]"),
    (re.compile(r"(://[^/\s:@]+:)[^@\s/]+@"), r"\1[redacted]@"),
]


def redact(text: str) -> str:
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


class _Redacting(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """{"time", "level", "logger", "message"[, "exception"]} per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry)


def configure(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else _Redacting("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
