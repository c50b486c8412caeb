"""One extender call, from its request to its reply: admitted under the concurrency caps, its
body read within the memory budget (limits.py), answered, counted and logged as one line
(logger loadext.requests, at debug for answered calls), or refused with a JSON error that
leads with the cause: 400 naming what is wrong, 413 too large, 408 too slow, 503 overloaded.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web

from loadext.http.limits import LARGE_BODY
from loadext.http.protocol import ProtocolError
from loadext.http.state import ServerState
from loadext.logs import request_id

log = logging.getLogger(__name__)
request_log = logging.getLogger("loadext.requests")

JSON = "application/json"


@dataclass(frozen=True, slots=True)
class Answer:
    """A verb's reply body, and how to say what it decided in the request log line: built only
    when that line is written (debug for answered calls), not on every call."""

    body: bytes
    summary: Callable[[], dict[str, Any]]


def _json_error(status: int, verb: str, message: str, **headers: str) -> web.Response:
    response = web.Response(
        status=status, body=orjson.dumps({"error": message, "verb": verb}), content_type=JSON, headers=headers
    )
    if status in (408, 413, 503):  # the body may be unread or half-read: this connection is done
        response.force_close()
    return response


def verb_handler(
    state: ServerState, verb: str, answer: Callable[[bytes], Awaitable[Answer]]
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    metrics = state.telemetry.verbs
    limits = state.limits
    admission, budget = state.admission, state.body_budget
    duration, count_outcome = metrics.handler_counters(verb)
    process_tag, serial = f"{verb[:2]}{os.urandom(4).hex()}", itertools.count(1)  # unique, and cheap

    too_large = f"request body too large: over --max-body-size ({limits.max_body_size} bytes)"

    def refuse(status: int, outcome: str, message: str, started: float, **headers: str) -> web.Response:
        """Refused before the body was read: counted and logged with the reason like the rest."""
        count_outcome(outcome)
        level = logging.DEBUG if outcome == "overloaded" else logging.WARNING
        if request_log.isEnabledFor(level):
            _log_request(level, verb, outcome, time.perf_counter() - started, dict, message)
        return _json_error(status, verb, message, **headers)

    async def handle(request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        rid = request.headers.get("X-Request-Id") or f"{process_tag}-{next(serial):x}"
        request_id.set(rid)
        outcome = "ok"
        error = ""
        summary: Callable[[], dict[str, Any]] = dict
        length = request.content_length
        if length is not None and length > limits.max_body_size:
            return refuse(413, "bad_request", f"{too_large}: {length} bytes declared", started, **{"X-Request-Id": rid})
        reserved = admission.admit(length)
        if reserved is None:
            message = f"{admission.requests} requests in flight; retry later (see --max-concurrent-requests)"
            return refuse(503, "overloaded", message, started, **{"Retry-After": "1", "X-Request-Id": rid})
        large, granted = reserved >= LARGE_BODY, False
        try:
            if large and not (granted := await budget.wait_turn(reserved, limits.body_timeout)):
                outcome = "overloaded"
                error = f"large bodies waited over --body-timeout for --body-memory ({limits.body_memory} bytes)"
                return _json_error(503, verb, error, **{"Retry-After": "1", "X-Request-Id": rid})
            # A large body is read into nothing that outlives this call (read() keeps a copy).
            reading = request.content.readexactly(length) if large and length is not None else request.read()
            if request.content.is_eof():  # the whole body came with the headers: no timer needed
                body = await reading
            else:
                async with asyncio.timeout(limits.body_timeout):  # a timer, not a task as wait_for makes
                    body = await reading
            reply = await answer(body)
            summary = reply.summary
            if not large:
                return web.Response(body=reply.body, content_type=JSON, headers={"X-Request-Id": rid})
            # Sent before the budget is given back, and held by nothing once sent: the body and
            # the reply each weigh tens of megabytes at 5000 nodes.
            outgoing = [reply.body]
            del body, reply
            return await _send(request, outgoing, rid)
        except ProtocolError as exc:
            outcome, error = "bad_request", str(exc)
            return _json_error(400, verb, error, **{"X-Request-Id": rid})
        except web.HTTPRequestEntityTooLarge:
            outcome, error = "bad_request", f"{too_large}: the body ran past it"
            return _json_error(413, verb, error, **{"X-Request-Id": rid})
        except (ConnectionResetError, asyncio.IncompleteReadError):  # the client went away mid-body
            outcome, error = "aborted", "client closed the connection"
            return _json_error(400, verb, error)
        except TimeoutError:
            outcome, error = "timeout", f"request body not received within {limits.body_timeout:g}s (--body-timeout)"
            metrics.slow_client("body")
            return _json_error(408, verb, error, **{"X-Request-Id": rid})
        except Exception as exc:  # a bug: say so in JSON, keep serving
            outcome, error = "error", f"internal error: {type(exc).__name__}: {exc}"
            log.exception("%s failed", verb)
            return _json_error(500, verb, error, **{"X-Request-Id": rid})
        finally:
            admission.release(reserved)
            if granted:
                budget.release(reserved)
            count_outcome(outcome)
            took = time.perf_counter() - started
            duration.observe(took)
            level = logging.DEBUG if outcome in ("ok", "overloaded", "aborted") else logging.WARNING
            if request_log.isEnabledFor(level):
                _log_request(level, verb, outcome, took, summary, error)

    return handle


async def _send(request: web.Request, outgoing: list[bytes], rid: str) -> web.StreamResponse:
    """Write a large reply now; `outgoing` is emptied, so no reference keeps it once written."""
    body = outgoing.pop()
    response = web.StreamResponse(headers={"X-Request-Id": rid})
    response.content_type, response.content_length = JSON, len(body)
    await response.prepare(request)
    await response.write(body)
    del body
    await response.write_eof()
    return response


def _log_request(
    level: int, verb: str, outcome: str, took: float, summarise: Callable[[], dict[str, Any]], error: str = ""
) -> None:
    """One line per extender call: what was asked, what loadext decided (or why it refused the
    call), how long it took. At debug for answered calls (switch on with PUT /debug/loglevel):
    measured at 500 nodes, a line per call costs about a third of the throughput; at warning
    for refused ones, always with the reason."""
    summary = summarise()
    fields = {"verb": verb, "outcome": outcome, "duration_ms": round(took * 1000, 3), **summary}
    if error:
        fields["error"] = error
        request_log.log(level, "%s %s %s: %s", verb, summary.get("pod", "-"), outcome, error, extra={"fields": fields})
    else:
        request_log.log(level, "%s %s %s", verb, summary.get("pod", "-"), outcome, extra={"fields": fields})
