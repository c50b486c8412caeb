"""The extender verbs: filter, prioritize and preempt over the cluster's state, typed results out.

Each verb is the same three steps: the candidates' identities and the table in force (read
through `VerbState`), the herd guard's correction where it applies (herd/guard.py; None leaves the
table's verdicts standing), and the answer. No wire format, no metrics: http/ decodes the
requests and encodes these results, telemetry/verbs.py counts them.
"""

from __future__ import annotations

import logging
import random
from collections import Counter as Tally
from collections.abc import Iterable, Mapping
from functools import partial
from itertools import compress
from operator import attrgetter, not_
from typing import Protocol

from loadext.config import Config
from loadext.core.decisions import Decision, DecisionLog
from loadext.core.herd.guard import Guard, InFlightSums, View
from loadext.core.herd.inflight import NO_PLACEMENTS
from loadext.core.herd.usage import Usage
from loadext.core.identity import Addresses
from loadext.core.policy import DecisionTable, Verdict, overload, soft_choice
from loadext.core.requests import ExtenderArgs, PreemptionArgs
from loadext.core.results import FilterResult, PreemptResult, PrioritizeResult, Rejections
from loadext.core.snapshot import Snapshot

log = logging.getLogger(__name__)
_REASON, _SCORE = attrgetter("reason"), attrgetter("score")

Judged = tuple[DecisionTable, list[str], list[Verdict] | None]  # table, identities, corrected verdicts


class VerbState(Protocol):
    """What the verbs read of loadext's state, and tell it, and nothing more. The Cluster's
    `verbs` reader implements it (cluster.py)."""

    @property
    def config(self) -> Config: ...

    def clock(self) -> float: ...

    @property
    def needs_node_details(self) -> bool:
        """Whether a request's Node objects must be read beyond their names."""

    def note_request(self, args: ExtenderArgs) -> None:
        """What a request tells about nodes: their names, and in non-cache mode their details."""

    def nodes_named(self, names: list[str]) -> None: ...

    def table(self) -> DecisionTable: ...

    def snapshot(self) -> Snapshot: ...

    def guard(self) -> Guard:
        """The herd guard in force (herd/guard.py NO_GUARD while it is off)."""

    def identities_of(self, names: list[str], addresses: Addresses, table: DecisionTable) -> list[str]: ...

    def view(self, table: DecisionTable) -> View: ...

    def strand(self, uid: str, names: list[str], incoming: Usage) -> None:
        """The pod's filter passed none of `names`: it waits for one to reopen (herd/stranded.py)."""

    def unstrand(self, uid: str) -> None: ...


class Extender:
    def __init__(self, state: VerbState) -> None:
        self._state = state
        self.decisions = DecisionLog()
        self._rng = random.Random()
        self._soft_logged: dict[str, float] = {}

    @property
    def needs_node_details(self) -> bool:
        """Whether http/ must decode a request's Node objects beyond their names."""
        return self._state.needs_node_details

    def _judge(self, args: ExtenderArgs) -> Judged:
        """The table and the candidates' identities, and the herd guard's verdicts where it
        corrects the table's (None: the table alone decides, read in one C-level pass)."""
        state = self._state
        state.note_request(args)
        table = state.table()
        identities = state.identities_of(args.names, args.addresses, table)
        guard = state.guard()
        incoming, own = guard.incoming(args.pod)
        view_of = partial(state.view, table)
        return table, identities, guard.corrected(view_of, args.names, identities, incoming, own)

    def verdicts(self, args: ExtenderArgs) -> list[Verdict]:
        """One verdict per candidate, as filter and prioritize judge them."""
        table, identities, verdicts = self._judge(args)
        return table.verdicts(identities) if verdicts is None else verdicts

    def filter(self, args: ExtenderArgs) -> FilterResult:
        table, identities, verdicts = self._judge(args)
        self._remember("filter", args, identities, table.by_identity if verdicts is None else verdicts)
        reasons = list(map(table.reason_of.__getitem__, identities) if verdicts is None else map(_REASON, verdicts))
        # Per node only C-level steps (map, all, compress, zip), as few as the answer allows:
        # each is a pass over ~500 names, and each costs 5 to 20 us live.
        flags: list[bool] | None = None  # every node passes: a DaemonSet's pod, or all under load
        if args.pod is None or not args.pod.is_daemonset:
            flags = list(map(not_, reasons))  # a refused node has a reason, a passed one ""
            if all(flags):
                flags = None
        soft = ""
        if flags is not None and args.names and not any(flags):
            chosen, soft = self._soft_pass(args, identities, table)  # rare: every candidate refused
            for index in chosen:
                flags[index] = True
        if flags is None:
            passed, rejected = args.names, {}
        else:
            passed = list(compress(args.names, flags))
            if soft:  # the nodes soft mode passed keep their reasons, but are not refused
                reasons = ["" if flag else reason for flag, reason in zip(flags, reasons, strict=True)]
            rejected = dict(zip(compress(args.names, reasons), filter(None, reasons), strict=True))  # "": passed
        rejections = _rejections(table, Tally(rejected.values()), verdicts or ()) if rejected else ()
        unresolvable = self._state.config.rejected_nodes == "unresolvable"
        self._track_stranding(args, bool(passed))
        return FilterResult(args.names, passed, flags, rejected, unresolvable, rejections, soft)

    def prioritize(self, args: ExtenderArgs) -> PrioritizeResult:
        table, identities, verdicts = self._judge(args)
        self._remember("prioritize", args, identities, table.by_identity if verdicts is None else verdicts)
        scores = list(map(table.score_of.__getitem__, identities) if verdicts is None else map(_SCORE, verdicts))
        best = None
        if scores:
            in_flight = self._state.guard().in_flight(self._state.clock())
            best = likely_node(args.names, scores, self._rng.randrange(len(scores)), in_flight)
        if best is not None and args.pod is not None and args.pod.uid:
            # The likely placement: in a burst kube-scheduler places the next pod before the
            # pod watch could show this one; the watch's binding replaces the guess.
            self._state.guard().count_now(args.pod.uid, args.names[best])
        return PrioritizeResult(args.names, scores, best)

    def preempt(self, args: PreemptionArgs) -> PreemptResult:
        """Keep the scheduler's victims, but only on nodes loadext's filter would accept, each
        judged as it would be after the preemption (herd/guard.py ActiveGuard.preemption)."""
        if args.pod is not None and args.pod.is_daemonset:
            return PreemptResult(len(args.victims), args.victims, ())
        state, names = self._state, list(args.victims)
        state.nodes_named(names)
        table = state.table()
        identities = state.identities_of(names, {}, table)
        view_of, guard = partial(state.view, table), state.guard()
        if args.pod is not None:
            verdicts = guard.preemption(view_of, names, identities, args.pod, args.victims)
        else:
            verdicts = guard.corrected(view_of, names, identities, Usage(), None)
        if verdicts is None:
            verdicts = table.verdicts(identities)
        kept = {name: args.victims[name] for name, verdict in zip(names, verdicts, strict=True) if verdict.passed}
        rejections = _rejections(table, Tally(v.reason for v in verdicts if not v.passed), verdicts)
        return PreemptResult(len(args.victims), kept, rejections)

    def _soft_pass(self, args: ExtenderArgs, identities: list[str], table: DecisionTable) -> tuple[list[int], str]:
        """Every candidate refused: soft mode may pass the least loaded instead (policy.soft_choice)."""
        state = self._state
        config, guard = state.config, state.guard()
        measured = table.verdicts(identities)
        threshold_soft = config.filter_mode == "soft"
        overloads: list[float | None] = []
        if threshold_soft:
            by_identity = state.snapshot().by_identity
            for identity, verdict in zip(identities, measured, strict=True):
                samples = by_identity.get(identity)
                overloads.append(overload(samples, config, table.pools.get(identity), verdict) if samples else None)
        view_of = partial(state.view, table)
        herd_overloads = guard.overloads(view_of, args.names, identities, measured, args.pod) if guard.soft else []
        chosen, why = soft_choice(measured, overloads, herd_overloads, guard.soft, threshold_soft)
        if chosen:
            now = state.clock()
            if now - self._soft_logged.get(why, 0.0) >= 10:
                self._soft_logged[why] = now
                log.info(
                    "filter for %s: every candidate refused (%s); soft mode passes %d of %d, the least loaded "
                    "(logged at most every 10s; loadext_filter_soft_passes_total counts each)",
                    args.pod.key if args.pod is not None else "-",
                    "pods in flight" if why == "herd" else "over thresholds",
                    len(chosen),
                    len(measured),
                )
        return chosen, why

    def _track_stranding(self, args: ExtenderArgs, passed_any: bool) -> None:
        """A filter that passes no node leaves the pod unschedulable (the extenders filter
        last): remember it, so that it is retried once a node would take it (Cluster.reopened_node)."""
        pod, state = args.pod, self._state
        if pod is None or not pod.uid:
            return
        if passed_any or not args.names:
            state.unstrand(pod.uid)
        else:
            estimate = state.guard().estimate_of(pod.uid)
            state.strand(pod.uid, args.names, estimate.usage if estimate else Usage())

    def _remember(
        self, verb: str, args: ExtenderArgs, identities: list[str], verdicts: list[Verdict] | Mapping[str, Verdict]
    ) -> None:
        """The decision, for explain --pod: references to what it was made from, no copies."""
        if args.pod is None or not args.pod.name:
            return
        state = self._state
        now, guard = state.clock(), state.guard()
        decision = Decision(
            verb,
            now,
            args.names,
            None if identities is args.names else identities,
            verdicts,
            state.snapshot(),
            state.config,
            guard.estimate_of(args.pod.uid),
            guard.in_flight(now),  # immutable sums, kept as they are now
        )
        self.decisions.record(args.pod.key, decision)


def _rejections(table: DecisionTable, reasons: Tally[str], verdicts: Iterable[Verdict]) -> Rejections:
    """Refused-node counts by (signal, cause), from the reasons' tally (see policy._causes)."""
    causes = table.causes
    out: list[tuple[str, str, int]] = []
    for reason, nodes in reasons.items():
        pairs = causes.get(reason)
        if pairs is None:  # a reason made per request (herd guard): read it off its verdict
            pairs = next((v.rejected_by for v in verdicts if v.reason == reason), ())
        out.extend((signal, cause, nodes) for signal, cause in pairs)
    return tuple(out)


def likely_node(names: list[str], scores: list[int], start: int, in_flight: InFlightSums | None) -> int:
    """The index of the node kube-scheduler most likely puts the pod on: a top score, and among
    tied ones (scores are 0..10, so a burst meets many ties) one with the fewest pods in
    flight. The scheduler breaks ties between equal extender scores with its own scores first,
    LeastAllocated among them, which favours the node with the fewest pods requested; a guess
    among the ties at random was wrong most of the time in a burst, and until the pod watch
    corrected it, the node really chosen looked emptier than it was and drew the next pods too
    (the e2e burst test put 8 pods on a node whose fair share was 5 under load)."""
    pick = top_pick(scores, start)
    if in_flight is None or names[pick] not in in_flight:
        return pick  # none has fewer than none in flight: the common case costs two C-level scans
    top = scores[pick]
    tied = list(compress(range(len(scores)), map(top.__eq__, scores)))
    placed = [in_flight.get(names[i], NO_PLACEMENTS)[1] for i in tied]
    fewest = min(placed)
    candidates = [i for i, count in zip(tied, placed, strict=True) if count == fewest]
    return candidates[start % len(candidates)]


def top_pick(scores: list[int], start: int) -> int:
    """The index of the first top score at or after `start`, wrapping around.

    The top node is loadext's guess of where the pod goes (Guard.count_now). kube-scheduler
    breaks ties at random (selectHost), so a guess that always took the first tied node would
    keep counting the pod on that one node, which would then look a pod busier than its peers
    at every moment of a burst and be starved. A random start spreads the guess over the ties;
    it costs two C-level scans, not a Python loop over the names."""
    top = max(scores)
    try:
        return scores.index(top, start)
    except ValueError:
        return scores.index(top)
