"""Log output: plain text for people, one JSON object per line for log pipelines, and secrets
kept out of both (a bearer token or a password in a URL must never reach a log line).

A line logged while an extender request is handled carries that request's id (also sent back
as X-Request-Id), so a scheduler-side timeout can be matched to loadext's lines. Structured
values go in `extra={"fields": {...}}`: keys of their own in JSON, key=value pairs in text.
"""

from __future__ import annotations

import json
import logging
import re
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
LEVELS = ("debug", "info", "warning", "error")

_SECRETS = [
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+"), r"\1[redacted]"),
    (re.compile(r"(://[^/\s:@]+:)[^@\s/]+@"), r"\1[redacted]@"),
]


def redact(text: str) -> str:
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def _stamp_request_id(record: logging.LogRecord) -> bool:
    record.request_id = request_id.get()
    return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields: dict[str, Any] = getattr(record, "fields", None) or {}
    rid = getattr(record, "request_id", None)
    return {"request_id": rid, **fields} if rid else fields


class _Redacting(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = _fields(record)
        if fields:
            text += " " + " ".join(f"{key}={json.dumps(value, separators=(',', ':'))}" for key, value in fields.items())
        return redact(text)


class JsonFormatter(logging.Formatter):
    """{"time", "level", "logger", "message"[, "request_id", fields...][, "exception"]} per line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return redact(json.dumps(entry))


def configure(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else _Redacting("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    handler.addFilter(_stamp_request_id)
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def level() -> str:
    return logging.getLevelName(logging.getLogger("loadext").getEffectiveLevel()).lower()


def set_level(name: str) -> None:
    """Switch loadext's own loggers at runtime (PUT /debug/loglevel); libraries (urllib3, the
    kubernetes client) stay at the level given at start, or debug would drown in their lines."""
    if name not in LEVELS:
        raise ValueError(f"unknown log level {name!r}; one of {', '.join(LEVELS)}")
    logging.getLogger("loadext").setLevel(name.upper())
