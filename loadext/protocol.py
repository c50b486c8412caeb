"""The kube-scheduler extender wire protocol (k8s.io/kube-scheduler/extender/v1), both ways.

The scheduler's types carry no json tags, so keys are Go field names; Go's decoder matches them
case-insensitively, and so do we (old schedulers sent lower-case keys). Replies always use the
exact Go names, carry every field, and use Python ints for scores: a float voids the reply.
Pod and Node objects keep their own lowerCamel keys and are passed through untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

MAX_EXTENDER_PRIORITY = 10


class ProtocolError(ValueError):
    """The body is not valid JSON or not the shape the verb expects; becomes HTTP 400."""


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str
    uid: str
    owner_kinds: tuple[str, ...]

    @property
    def is_daemonset(self) -> bool:
        return "DaemonSet" in self.owner_kinds

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class CandidateNode:
    """A node named in a request; `obj` is the full Node in non-cache mode, echoed back as is."""

    name: str
    addresses: tuple[str, ...]
    obj: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """Filter and prioritize requests. `full_nodes` is True for nodeCacheCapable: false."""

    pod: PodRef | None
    nodes: tuple[CandidateNode, ...]
    full_nodes: bool


@dataclass(frozen=True, slots=True)
class Victims:
    uids: tuple[str, ...]
    num_pdb_violations: int


@dataclass(frozen=True, slots=True)
class PreemptionArgs:
    pod: PodRef | None
    victims: dict[str, Victims]


@dataclass(frozen=True, slots=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


# --- decoding ----------------------------------------------------------------------------------


def _loads(body: bytes) -> Any:
    if not body.strip():
        raise ProtocolError("empty body: expected a JSON object")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"malformed JSON: {exc}") from exc


def field(obj: Mapping[str, Any], name: str) -> Any:
    """Go's rule: the exact key wins, otherwise a case-insensitive match; absent means None."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for key, value in obj.items():
        if key.lower() == lowered:
            return value
    return None


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where}: expected a JSON object, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean"}.get(
        type(value), "null" if value is None else "number"
    )


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ProtocolError(f"{where}: expected a non-empty string, got {_kind(value)}")
    return value


def _pod(value: Any) -> PodRef | None:
    if value is None:
        return None
    pod = _object(value, "Pod")
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    owners = meta.get("ownerReferences")
    owner_kinds = (
        tuple(str(ref.get("kind")) for ref in owners if isinstance(ref, dict)) if isinstance(owners, list) else ()
    )
    return PodRef(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        owner_kinds=owner_kinds,
    )


def node_addresses(node: Mapping[str, Any]) -> tuple[str, ...]:
    """InternalIPs first (the address node-exporter is scraped on), then other IP types."""
    status = node.get("status")
    addresses = status.get("addresses") if isinstance(status, dict) else None
    if not isinstance(addresses, list):
        return ()
    internal, other = [], []
    for entry in addresses:
        if isinstance(entry, dict) and isinstance(entry.get("address"), str):
            kind = entry.get("type")
            if kind == "InternalIP":
                internal.append(entry["address"])
            elif kind == "ExternalIP":
                other.append(entry["address"])
    return tuple(internal + other)


def decode_extender_args(body: bytes) -> ExtenderArgs:
    doc = _object(_loads(body), "body")
    pod = _pod(field(doc, "Pod"))
    names = field(doc, "NodeNames")
    node_list = field(doc, "Nodes")
    if names is not None:
        if not isinstance(names, list):
            raise ProtocolError(f"NodeNames: expected an array of strings, got {_kind(names)}")
        nodes = tuple(CandidateNode(_name(n, f"NodeNames[{i}]"), (), None) for i, n in enumerate(names))
        return ExtenderArgs(pod, _unique(nodes), full_nodes=False)
    if node_list is not None:
        items = _object(node_list, "Nodes").get("items")
        if items is None:
            return ExtenderArgs(pod, (), full_nodes=True)
        if not isinstance(items, list):
            raise ProtocolError(f"Nodes.items: expected an array, got {_kind(items)}")
        candidates = []
        for i, item in enumerate(items):
            node = _object(item, f"Nodes.items[{i}]")
            meta = node.get("metadata")
            name = _name(meta.get("name") if isinstance(meta, dict) else None, f"Nodes.items[{i}].metadata.name")
            candidates.append(CandidateNode(name, node_addresses(node), node))
        return ExtenderArgs(pod, _unique(tuple(candidates)), full_nodes=True)
    return ExtenderArgs(pod, (), full_nodes=False)


def _unique(nodes: tuple[CandidateNode, ...]) -> tuple[CandidateNode, ...]:
    """The scheduler never repeats a node; if a client does, answering twice would double-count."""
    seen: set[str] = set()
    out = []
    for node in nodes:
        if node.name not in seen:
            seen.add(node.name)
            out.append(node)
    return tuple(out) if len(out) != len(nodes) else nodes


def _victims(value: Any, where: str, full_pods: bool) -> Victims:
    entry = _object(value, where)
    pods = field(entry, "Pods")
    if pods is None:
        pods = []
    if not isinstance(pods, list):
        raise ProtocolError(f"{where}.Pods: expected an array, got {_kind(pods)}")
    uids = []
    for i, pod in enumerate(pods):
        obj = _object(pod, f"{where}.Pods[{i}]")
        if full_pods:
            meta = obj.get("metadata")
            uid = meta.get("uid") if isinstance(meta, dict) else None
            uids.append(_name(uid, f"{where}.Pods[{i}].metadata.uid"))
        else:
            uids.append(_name(field(obj, "UID"), f"{where}.Pods[{i}].UID"))
    violations = field(entry, "NumPDBViolations")
    if violations is None:
        violations = 0
    if isinstance(violations, bool) or not isinstance(violations, int):
        raise ProtocolError(f"{where}.NumPDBViolations: expected an integer, got {_kind(violations)}")
    return Victims(tuple(uids), violations)


def decode_preemption_args(body: bytes) -> PreemptionArgs:
    doc = _object(_loads(body), "body")
    pod = _pod(field(doc, "Pod"))
    meta = field(doc, "NodeNameToMetaVictims")
    full = field(doc, "NodeNameToVictims")
    source, key, full_pods = (
        (meta, "NodeNameToMetaVictims", False) if meta is not None else (full, "NodeNameToVictims", True)
    )
    victims: dict[str, Victims] = {}
    if source is not None:
        for node, entry in _object(source, key).items():
            victims[node] = _victims(entry, f"{key}[{node!r}]", full_pods)
    return PreemptionArgs(pod, victims)


def decode_binding_args(body: bytes) -> BindingArgs:
    doc = _object(_loads(body), "body")
    return BindingArgs(
        pod_name=_name(field(doc, "PodName"), "PodName"),
        pod_namespace=_name(field(doc, "PodNamespace"), "PodNamespace"),
        pod_uid=_name(field(doc, "PodUID"), "PodUID"),
        node=_name(field(doc, "Node"), "Node"),
    )


# --- encoding ----------------------------------------------------------------------------------


def encode_filter_result(
    args: ExtenderArgs,
    passed: list[CandidateNode],
    failed: dict[str, str],
    unresolvable: dict[str, str],
    error: str = "",
) -> bytes:
    """In non-cache mode only `Nodes` counts, so the passing Node objects go back unchanged."""
    if args.full_nodes:
        nodes: Any = {"metadata": {}, "items": [node.obj for node in passed]}
        names: Any = None
    else:
        nodes, names = None, [node.name for node in passed]
    return orjson.dumps(
        {
            "Nodes": nodes,
            "NodeNames": names,
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": error,
        }
    )


def clamp_score(score: float) -> int:
    """The scheduler adds Score x weight x 10 unchecked, so the range is ours to enforce."""
    return max(0, min(MAX_EXTENDER_PRIORITY, round(score)))


def encode_host_priority_list(scores: list[tuple[str, int]]) -> bytes:
    return orjson.dumps([{"Host": host, "Score": clamp_score(score)} for host, score in scores])


def encode_preemption_result(victims: dict[str, Victims]) -> bytes:
    return orjson.dumps(
        {
            "NodeNameToMetaVictims": {
                node: {"Pods": [{"UID": uid} for uid in v.uids], "NumPDBViolations": v.num_pdb_violations}
                for node, v in victims.items()
            }
        }
    )


def encode_binding_result(error: str = "") -> bytes:
    return orjson.dumps({"Error": error})
