"""What the HTTP layer serves from: the verbs, explain's port, telemetry, bind and the limits.
app.py builds it; server.py routes to it; verbs.py handles each extender call with it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from loadext.config.serving import Limits
from loadext.core.explain import ExplainState
from loadext.core.extender import Extender
from loadext.core.requests import BindingArgs
from loadext.http.limits import Admission, BodyBudget
from loadext.http.protocol import Codec
from loadext.telemetry import Telemetry

Binder = Callable[[BindingArgs], Awaitable[str]]  # "" when bound, else the error for the scheduler


@dataclass
class ServerState:
    """What the HTTP layer serves from; app.py builds it and runs the background jobs."""

    explained: ExplainState  # what explain reads
    extender: Extender  # the verbs
    telemetry: Telemetry
    bind: Binder
    limits: Limits = field(default_factory=Limits)
    rebalance_report: Callable[[], dict[str, Any]] | None = None  # /explain's "rebalance" (the rebalancer runs)
    draining: bool = False  # set on SIGTERM: readiness false, connections closed after each reply
    waiting_for: Callable[[], list[str]] = list  # what readiness waits for (sources/readiness.py)
    codec: Codec = field(default_factory=Codec)  # its caches are this server's, not the process's
    admission: Admission = field(init=False)
    body_budget: BodyBudget = field(init=False)

    def __post_init__(self) -> None:
        self.admission = Admission(self.limits)
        self.body_budget = BodyBudget(self.limits.body_memory)
        self.telemetry.verbs.watch_in_flight(lambda: self.admission.requests)
