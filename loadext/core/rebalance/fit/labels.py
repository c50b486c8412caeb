"""Label selectors, node selector terms and tolerations, matched as the API machinery matches them
(k8s.io/apimachinery labels, component-helpers nodeaffinity, core/v1 helper ToleratesTaint)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from loadext.config.schema import every_label
from loadext.core.rebalance.fit.model import (
    NAME_FIELD,
    LabelSelector,
    NodeSelectorTerm,
    Requirement,
    Taint,
    Toleration,
)

LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
NODE_OPERATORS = LABEL_OPERATORS | {"Gt", "Lt"}
TOLERATION_OPERATORS = frozenset({"", "Equal", "Exists"})
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})  # the effects a filter judges
_INTEGER = re.compile(r"[+-]?[0-9]+")


def requirement_matches(requirement: Requirement, labels: Mapping[str, str]) -> bool:
    key, operator, values = requirement.key, requirement.operator, requirement.values
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        have, want = _int64(labels[key]), _int64(values[0])
        if have is None or want is None:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    """None is the nil selector, which matches nothing; an empty one matches everything."""
    if selector is None or not every_label(selector.match_labels, labels):
        return False
    return all(requirement_matches(r, labels) for r in selector.expressions)


def term_matches(term: NodeSelectorTerm, name: str, labels: Mapping[str, str]) -> bool:
    if not term.expressions and not term.fields:
        return False
    if not all(requirement_matches(r, labels) for r in term.expressions):
        return False
    return all(r.key == NAME_FIELD and requirement_matches(r, {NAME_FIELD: name}) for r in term.fields)


def node_affinity_matches(
    node_selector: Mapping[str, str], terms: tuple[NodeSelectorTerm, ...] | None, name: str, labels: Mapping[str, str]
) -> bool:
    """The pod's nodeSelector (every label) and its required node affinity (any term)."""
    if not every_label(node_selector.items(), labels):
        return False
    return terms is None or any(term_matches(term, name, labels) for term in terms)


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    return toleration.operator in ("", "Equal") and toleration.value == taint.value


def untolerated(taints: Iterable[Taint], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first NoSchedule or NoExecute taint no toleration covers."""
    for taint in taints:
        if taint.effect in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _int64(text: str) -> int | None:
    """Go's strconv.ParseInt(text, 10, 64): ASCII digits with an optional sign, nothing else
    (Python's int() would also take spaces and underscores)."""
    if _INTEGER.fullmatch(text) is None:
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None
