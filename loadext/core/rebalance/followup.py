"""The stop rule: whether a move helped, and a pause for the workloads where it did not.

A move is an eviction bet that the pod's controller recreates it and the scheduler places the
replacement on a node with room. Each eviction is followed until that bet is settled:

- the replacement is the first pod of the same workload (its owner as the herd guard keys it)
  that did not exist at the eviction, each pod claimed by one move;
- `pending`: no replacement bound within `stopRule.pendingFor` of the eviction (Pending, or never
  created: the workload is a pod short either way);
- `hot`: bound to a node that the filter refuses (over a threshold) at any cycle within the herd
  window after the rebalancer first saw it bound: the move made another node hot;
- `on_target` / `elsewhere`: bound and the herd window passed with its node within the
  thresholds, on the node the plan named or on another.

`pending` and `hot` pause moves of the workload for `stopRule.pauseFor`: a rebalancer that
moves a pod that cannot be placed, or that heats the node it lands on, would do the same at
the next cycle. A workload's pods are then kept where they are, and the exclusion says why.
The state is the acting replica's own: turned off, or the Lease lost, it is forgotten.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

OUTCOMES = ("on_target", "elsewhere", "pending", "hot")  # loadext_rebalance_replacements_total{outcome}
STOPPING = ("pending", "hot")  # the outcomes that pause the workload


@dataclass(frozen=True)
class Move:
    """An eviction, as the follow-up needs it."""

    workload: str
    pod: str  # namespace/name of the evicted pod
    uid: str
    source: str  # the node it left
    target: str  # the node the plan named for its replacement
    at: float
    existing: frozenset[str]  # the uids of the workload's pods at the eviction: not its replacement


@dataclass(frozen=True)
class Replica:
    """A pod of a workload, as one cycle's read sees it."""

    uid: str
    pod: str  # namespace/name
    workload: str
    node: str  # "" while Pending


@dataclass(frozen=True)
class Outcome:
    move: Move
    outcome: str  # an OUTCOMES value
    replacement: str  # namespace/name; "" when none appeared
    replacement_uid: str
    node: str  # where the replacement was bound; "" when it was not
    detail: str  # in words, for the Event, the log and /explain


@dataclass(frozen=True)
class Pause:
    until: float
    why: str


@dataclass
class _Followed:
    move: Move
    uid: str = ""  # the replacement, once one is claimed
    pod: str = ""
    node: str = ""
    bound_seen: float = 0.0  # when a cycle first saw it bound


class Followup:
    def __init__(self) -> None:
        self._open: list[_Followed] = []
        self._paused: dict[str, Pause] = {}  # workload -> until when, and why

    def moved(self, move: Move) -> None:
        self._open.append(_Followed(move))

    def forget(self) -> None:
        """The rebalancer stopped acting here (turned off, or another replica holds the Lease):
        its moves and pauses are no longer this replica's to judge."""
        self._open.clear()
        self._paused.clear()

    @property
    def following(self) -> bool:
        """Moves not settled yet: the rebalancer reads the cluster even with no node hot."""
        return bool(self._open)

    def observe(
        self,
        replicas: Iterable[Replica],
        refused: frozenset[str],
        now: float,
        pending_for: float,
        window: float,
        pause_for: float,
    ) -> list[Outcome]:
        """One cycle: `replicas` are the followed workloads' pods now (others are ignored),
        `refused` the nodes the filter refuses now. Returns the moves settled by it, and pauses
        the workloads of those that did not help."""
        by_workload: dict[str, list[Replica]] = {}
        for replica in replicas:
            by_workload.setdefault(replica.workload, []).append(replica)
        claimed = {f.uid for f in self._open if f.uid}
        settled: list[Outcome] = []
        still: list[_Followed] = []
        for followed in self._open:
            pods = {r.uid: r for r in by_workload.get(followed.move.workload, ())}
            if followed.uid not in pods:  # none claimed yet, or the claimed one went: the next
                followed.uid, followed.pod, followed.node, followed.bound_seen = "", "", "", 0.0
                fresh = [r for r in pods.values() if r.uid not in followed.move.existing and r.uid not in claimed]
                if fresh:
                    first = min(fresh, key=lambda r: (r.node == "", r.pod))  # a bound one, if any
                    followed.uid, followed.pod = first.uid, first.pod
                    claimed.add(first.uid)
            outcome = _settle(followed, pods.get(followed.uid), refused, now, pending_for, window)
            if outcome is None:
                still.append(followed)
                continue
            settled.append(outcome)
            if outcome.outcome in STOPPING:
                self._paused[followed.move.workload] = Pause(now + pause_for, outcome.detail)
        self._open = still
        return settled

    @property
    def workloads(self) -> set[str]:
        """The workloads with a move being followed."""
        return {f.move.workload for f in self._open}

    def paused(self, now: float) -> dict[str, Pause]:
        """workload -> its pause, for the workloads paused now."""
        self._paused = {w: p for w, p in self._paused.items() if p.until > now}
        return dict(self._paused)


def _settle(
    followed: _Followed, replica: Replica | None, refused: frozenset[str], now: float, pending_for: float, window: float
) -> Outcome | None:
    move = followed.move
    if replica is None or not replica.node:
        if now - move.at < pending_for:
            return None
        if replica is None:
            why = f"no replacement of {move.pod} appeared within {pending_for:.0f}s of its eviction"
        else:
            why = f"the replacement of {move.pod}, {replica.pod}, stayed Pending for {now - move.at:.0f}s"
        return Outcome(move, "pending", followed.pod, followed.uid, "", why)
    if not followed.bound_seen or followed.node != replica.node:
        followed.node, followed.bound_seen = replica.node, now
    if replica.node in refused:
        why = f"the replacement of {move.pod}, {replica.pod}, landed on {replica.node}, which is over a threshold now"
        return Outcome(move, "hot", replica.pod, replica.uid, replica.node, why)
    if now - followed.bound_seen < window:
        return None
    where = "on_target" if replica.node == move.target else "elsewhere"
    why = f"the replacement of {move.pod}, {replica.pod}, runs on {replica.node} (planned: {move.target})"
    return Outcome(move, where, replica.pod, replica.uid, replica.node, why)
