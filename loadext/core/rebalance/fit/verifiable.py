"""What the fit cannot judge, named, so that a pod with it stays where it is: loadext never guesses
whether the scheduler would take a pod it cannot evaluate.

The mapping (actors/placement.py) lists what it met that the model has no field for (volumes
bound to a zone or node, resource claims, scheduling gates, values of an enum it does not
know); here, besides those, the operators the matchers do not know.
"""

from __future__ import annotations

from collections.abc import Iterable

from loadext.core.rebalance.fit.labels import LABEL_OPERATORS, NODE_OPERATORS, TOLERATION_OPERATORS
from loadext.core.rebalance.fit.model import NAME_FIELD, LabelSelector, PodConstraints

# Volume kinds no default filter judges (VolumeBinding, VolumeZone, VolumeRestrictions and
# NodeVolumeLimits look only at claims, ephemeral and CSI volumes and cloud disks).
NEUTRAL_VOLUMES = frozenset({"configMap", "secret", "emptyDir", "hostPath", "projected", "downwardAPI"})


def unverifiable(pod: PodConstraints) -> str | None:
    """`cannot verify <what>`, or None when every constraint of the pod can be judged."""
    if pod.unknown:
        return f"cannot verify {pod.unknown[0]}"
    for term in pod.node_terms or ():
        for requirement in term.expressions:
            if requirement.operator not in NODE_OPERATORS:
                return f"cannot verify node affinity operator {requirement.operator!r}"
        for requirement in term.fields:
            if requirement.key != NAME_FIELD or requirement.operator not in ("In", "NotIn"):
                return f"cannot verify node affinity field {requirement.key} {requirement.operator}"
    for toleration in pod.tolerations:
        if toleration.operator not in TOLERATION_OPERATORS:
            return f"cannot verify toleration operator {toleration.operator!r}"
    selectors: list[LabelSelector | None] = [c.selector for c in pod.spread]
    for pod_term in (*pod.affinity, *pod.anti_affinity):
        selectors += [pod_term.selector, pod_term.namespace_selector]
    return _unknown_operator(s for s in selectors if s is not None)


def _unknown_operator(selectors: Iterable[LabelSelector]) -> str | None:
    for selector in selectors:
        for requirement in selector.expressions:
            if requirement.operator not in LABEL_OPERATORS:
                return f"cannot verify label selector operator {requirement.operator!r}"
    return None
