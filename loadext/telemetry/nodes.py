"""Per-node gauges, rendered as exposition text once per refresh round, not per scrape.

At 15 000 nodes the family is about 90 000 samples: built by the client library's collector on
every scrape it cost 0.5 CPU s a scrape, more than the refresh loop itself. So the text is
rendered once a round has been published (in a worker thread), and each scrape appends those
bytes to the rest of the registry's. Formatted directly, the text costs about an eighth of the
library's, so a render every round (5 s) costs less than the library's every scrape (15 s),
and none lands on a scrape. A deleted node simply stops appearing at the next round, and the family
can be switched off (telemetry.perNodeMetrics) for huge clusters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from loadext.core.policy import NodeState

RATIO = "loadext_node_signal_ratio"
STAMP = "loadext_node_signal_timestamp_seconds"
SCHEDULABLE = "loadext_node_schedulable"
SCORE = "loadext_node_score"
FAMILIES = {
    RATIO: "Utilisation loadext currently believes per node and signal (0..1).",
    STAMP: "When the value in loadext_node_signal_ratio was evaluated by Prometheus.",
    SCHEDULABLE: "1 if loadext's filter passes the node now, 0 if it refuses it.",
    SCORE: "The score loadext gives the node now (0..10).",
}


def _label(value: str) -> str:
    """A label value escaped as the text format wants it."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if math.isfinite(value):
        return repr(float(value))
    return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")


def render(states: Iterable[NodeState]) -> bytes:
    """The four families in the Prometheus text format (0.0.4), every node's samples."""
    lines: dict[str, list[str]] = {
        name: [f"# HELP {name} {help_}", f"# TYPE {name} gauge"] for name, help_ in FAMILIES.items()
    }
    ratio, stamp, schedulable, score = (lines[name] for name in FAMILIES)
    for state in states:
        node = _label(state.node)
        for signal, sample in state.samples.items():
            labels = f'{{node="{node}",signal="{_label(signal)}"}} '
            ratio.append(f"{RATIO}{labels}{_number(sample.value)}")
            stamp.append(f"{STAMP}{labels}{_number(sample.timestamp)}")
        schedulable.append(f'{SCHEDULABLE}{{node="{node}"}} {1 if state.verdict.passed else 0}')
        score.append(f'{SCORE}{{node="{node}"}} {_number(state.verdict.score)}')
    return "".join(line + "\n" for family in lines.values() for line in family).encode()


class NodeMetrics:
    def __init__(self) -> None:
        self._text = b""
        self.enabled = True

    def export(self, enabled: bool) -> None:
        """Switch the family on or off (off: gone from the next scrape)."""
        self.enabled = enabled
        if not enabled:
            self._text = b""

    def render(self, states: Iterable[NodeState]) -> None:
        """A round was published: its per-node text, safe to call from a worker thread."""
        text = render(states)
        if self.enabled:
            self._text = text

    def exposition(self) -> bytes:
        return self._text
