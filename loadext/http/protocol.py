"""The kube-scheduler extender wire protocol (k8s.io/kube-scheduler/extender/v1), both ways.

The scheduler's types carry no json tags, so keys are Go field names; Go's decoder matches them
case-insensitively, and so do we (old schedulers sent lower-case keys). Replies always use the
exact Go names, carry every field, and use Python ints for scores: a float voids the reply.
Pod and Node objects keep their own lowerCamel keys and are passed through untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from itertools import compress
from operator import getitem
from typing import Any

import msgspec
import orjson

from loadext.core.policy import MAX_EXTENDER_PRIORITY
from loadext.core.requests import BindingArgs, ExtenderArgs, PodRef, PreemptionArgs, Victims
from loadext.core.results import FilterResult, PreemptResult, PrioritizeResult
from loadext.shared.objects import Node, NonEmpty, Pod


class ProtocolError(ValueError):
    """The body is not valid JSON or not the shape the verb expects; becomes HTTP 400."""


@dataclass(frozen=True, slots=True)
class ExtenderRequest:
    """A decoded filter or prioritize body: the arguments loadext decides on and, in non-cache
    mode, each Node object as the raw bytes it arrived in (aligned with `args.names`), so that
    passing nodes go back byte for byte."""

    args: ExtenderArgs
    full_nodes: list[msgspec.Raw] | None = None


# --- decoding ----------------------------------------------------------------------------------
#
# msgspec reads the top level as raw spans and decodes only the fields loadext needs from each,
# skipping the rest of every Pod and Node in C. Extender-level keys are matched the Go way
# (exact first, then case-insensitively); keys inside Pod and Node objects are lowerCamel.


class _NodeList(msgspec.Struct):
    items: list[msgspec.Raw] | None = None


_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_POD = msgspec.json.Decoder(Pod | None)
_NAMES = msgspec.json.Decoder(list[NonEmpty] | None)
_NODE_LIST = msgspec.json.Decoder(_NodeList | None)
_NODE = msgspec.json.Decoder(Node)
_MISSING = msgspec.Raw(b"null")


def _decode(decoder: msgspec.json.Decoder[Any], raw: msgspec.Raw | bytes, where: str) -> Any:
    try:
        return decoder.decode(raw)
    except msgspec.ValidationError as exc:
        message, _, path = str(exc).partition(" - at `$")
        raise ProtocolError(f"{where}{path.rstrip('`')}: {message}") from exc
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"{where}: malformed JSON: {_decode_reason(exc)}") from exc


def _top(body: bytes) -> dict[str, msgspec.Raw]:
    if not body.strip():
        raise ProtocolError("empty body: expected a JSON object")
    # msgspec checks UTF-8 only in the strings it decodes; Node objects are echoed as raw spans,
    # so an invalid byte there would reach the reply (found by atheris). isascii() is a fast path.
    if not body.isascii():
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"body is not valid UTF-8 (byte {exc.start})") from exc
    try:
        top: dict[str, msgspec.Raw] = _TOP.decode(body)
    except msgspec.ValidationError as exc:
        raise ProtocolError(f"body: expected a JSON object ({exc})") from exc
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"malformed JSON: {_decode_reason(exc)}") from exc
    return top


def _decode_reason(exc: msgspec.DecodeError) -> str:
    """msgspec says "JSON is malformed: invalid character (byte 1)": keep the part after it."""
    return str(exc).removeprefix("JSON is malformed: ") or "not JSON"


def field_raw(obj: Mapping[str, msgspec.Raw], name: str) -> msgspec.Raw:
    """Go's rule: the exact key wins, otherwise a case-insensitive match; absent reads as null."""
    if name in obj:
        return obj[name]
    lowered = name.lower()
    for key, value in obj.items():
        if key.lower() == lowered:
            return value
    return _MISSING


class _PodMemo:
    """The PodRef of each recent Pod body. kube-scheduler sends a pod's same bytes to filter
    and then to prioritize (Go's encoder sorts map keys, so they are equal): the second call
    hashes ~5 KB instead of decoding it again. PodRefs are frozen, so sharing one is safe.
    Bounded: past `size` distinct pods it starts over."""

    def __init__(self, size: int = 256) -> None:
        self._refs: dict[bytes, PodRef | None] = {}
        self._size = size

    def get(self, raw: msgspec.Raw) -> PodRef | None:
        key = bytes(raw)
        try:
            return self._refs[key]
        except KeyError:
            pass
        ref = _pod_ref(raw)
        if len(self._refs) >= self._size:
            self._refs.clear()
        self._refs[key] = ref
        return ref


def _pod_ref(raw: msgspec.Raw) -> PodRef | None:
    pod = _decode(_POD, raw, "Pod")
    return None if pod is None else pod.ref()


class _LastNames:
    """The NodeNames list of the last call. kube-scheduler sends prioritize the nodes that
    passed filter, in the order filter answered them (loadext keeps the request's order): when
    every node passed, prioritize's bytes are filter's, and it shares filter's list instead of
    decoding it again (~25 us and, for the decision log, ~37 KB per 500 names). Lists are never
    changed once decoded, so sharing one is safe; (bytes, list) is swapped as one tuple, so a
    reader never sees one call's bytes with another's list. One entry compared, not _PodMemo's
    dict: hashing 500 names' bytes costs ~1.3 us a call, a compare that fails at the length
    ~0.1 us, and prioritize only ever follows its own filter."""

    def __init__(self) -> None:
        self._last: tuple[bytes, list[str] | None] = (b"", None)

    def get(self, raw: msgspec.Raw) -> list[str] | None:
        key = bytes(raw)
        last = self._last
        if key == last[0]:
            return last[1]
        names: list[str] | None = _decode(_NAMES, raw, "NodeNames")
        if names is not None and len(set(names)) != len(names):
            names = list(dict.fromkeys(names))  # a repeated node would be answered twice
        self._last = (key, names)
        return names


_NAME_PREFIX = b'{"metadata":{"name":"'


def _leading_name(raw: msgspec.Raw) -> str | None:
    """Go's encoder writes `metadata` first and `name` first within it, so a Node's name is
    read from its first bytes without parsing the other ~7 KB; anything else takes the slow path."""
    head = memoryview(raw)[:320].tobytes()
    start = len(_NAME_PREFIX)
    end = head.find(b'"', start)
    if not head.startswith(_NAME_PREFIX) or end <= start or b"\\" in head[start:end]:
        return None
    return head[start:end].decode()


class _MetaPod(msgspec.Struct):
    UID: NonEmpty


class _PodUID(msgspec.Struct):
    uid: NonEmpty


class _FullPod(msgspec.Struct):
    metadata: _PodUID


_META_VICTIMS = msgspec.json.Decoder(dict[str, dict[str, msgspec.Raw]] | None)
_META_POD_LIST = msgspec.json.Decoder(list[_MetaPod] | None)
_FULL_POD_LIST = msgspec.json.Decoder(list[_FullPod] | None)
_INT = msgspec.json.Decoder(int | None)


_NAME = msgspec.json.Decoder(NonEmpty)


def decode_binding_args(body: bytes) -> BindingArgs:
    top = _top(body)

    def name(key: str) -> str:
        value: str = _decode(_NAME, field_raw(top, key), key)
        return value

    return BindingArgs(
        pod_name=name("PodName"), pod_namespace=name("PodNamespace"), pod_uid=name("PodUID"), node=name("Node")
    )


# --- encoding ----------------------------------------------------------------------------------


def encode_filter_result(result: FilterResult, full_nodes: list[msgspec.Raw] | None) -> bytes:
    """In non-cache mode only `Nodes` counts, so the passing Node objects go back exactly as
    they came (the request's raw spans, no copy per node)."""
    failed, unresolvable = ({}, result.rejected) if result.unresolvable else (result.rejected, {})
    tail = orjson.dumps({"FailedNodes": failed, "FailedAndUnresolvableNodes": unresolvable, "Error": ""})
    if full_nodes is not None:
        items = b",".join(full_nodes if result.flags is None else compress(full_nodes, result.flags))
        return b"".join((b'{"Nodes":{"metadata":{},"items":[', items, b']},"NodeNames":null,', tail[1:]))
    return b'{"Nodes":null,"NodeNames":' + orjson.dumps(result.passed) + b"," + tail[1:]


class _PriorityFragments:
    """Each node's `{"Host":...,"Score":N}` for every score 0..10, encoded once (the name
    escaped by orjson) and joined per request at C speed: building and encoding a dict per
    node was most of prioritize's time at 500 names (docs/benchmarks.md). Bounded: past
    `max_nodes` names (a node churn far beyond any cluster) it starts over.

    The fragments are built by formatting, not kept as orjson.dumps results: each of those
    holds a buffer of about 4 KB however short its JSON, and 5000 nodes' 55,000 fragments took
    214 MB (tracemalloc, nodes-5000 prioritize); formatted, they take their own size."""

    def __init__(self, max_nodes: int = 20_000) -> None:
        self._by_name: dict[str, tuple[bytes, ...]] = {}
        self._max_nodes = max_nodes

    def join(self, names: list[str], scores: list[int]) -> bytes:
        by_name = self._by_name
        try:
            parts = list(map(getitem, map(by_name.__getitem__, names), scores))
        except KeyError:  # a node not seen before: encode its fragments, then join
            if len(by_name) + len(names) > self._max_nodes:
                by_name.clear()
            for name in set(names).difference(by_name):
                host = orjson.dumps(name)
                by_name[name] = tuple(b'{"Host":%b,"Score":%d}' % (host, score) for score in _SCORES)
            parts = list(map(getitem, map(by_name.__getitem__, names), scores))
        return b"[" + b",".join(parts) + b"]"


_SCORES = range(MAX_EXTENDER_PRIORITY + 1)


def encode_preemption_result(result: PreemptResult) -> bytes:
    return orjson.dumps(
        {
            "NodeNameToMetaVictims": {
                node: {"Pods": [{"UID": uid} for uid in v.uids], "NumPDBViolations": v.num_pdb_violations}
                for node, v in result.kept.items()
            }
        }
    )


def encode_binding_result(error: str = "") -> bytes:
    return orjson.dumps({"Error": error})


class Codec:
    """The wire codec of one server, with the caches that make repeated bytes cheap: each
    recent Pod's PodRef (filter and prioritize send the same pod), the last NodeNames list
    (prioritize repeats filter's) and every node's score fragments. They belong to the App
    that serves with them (http/server.py ServerState), never to the process."""

    def __init__(self) -> None:
        self._pods = _PodMemo()
        self._names = _LastNames()
        self._fragments = _PriorityFragments()

    def decode_extender_args(self, body: bytes, node_details: bool = False) -> ExtenderRequest:
        """`node_details`: also read each full Node's IPs, labels and allocatable (address
        identities, pools and the herd guard need them); otherwise only names are read."""
        top = _top(body)
        pod = self._pods.get(field_raw(top, "Pod"))
        listed = self._names.get(field_raw(top, "NodeNames"))
        if listed is not None:
            return ExtenderRequest(ExtenderArgs(pod, listed))
        node_list = _decode(_NODE_LIST, field_raw(top, "Nodes"), "Nodes")
        if node_list is None or node_list.items is None:
            return ExtenderRequest(ExtenderArgs(pod, []), None if node_list is None else [])
        names: list[str] = []
        raws, addresses, labels, allocatable, seen = [], {}, {}, {}, set()
        for i, raw in enumerate(node_list.items):
            name = None if node_details else _leading_name(raw)
            if name is None:
                node = _decode(_NODE, raw, f"Nodes.items[{i}]")
                name = node.metadata.name
                if node_details:
                    addresses[name] = node.ips()
                    labels[name] = node.metadata.labels or {}
                    allocatable[name] = node.allocatable()
            if name in seen:
                continue
            seen.add(name)
            names.append(name)
            raws.append(raw)
        return ExtenderRequest(ExtenderArgs(pod, names, addresses, labels, allocatable), raws)

    def decode_preemption_args(self, body: bytes) -> PreemptionArgs:
        """Victims come as UIDs (cache mode) or as full Pods; either way loadext keeps UIDs."""
        top = _top(body)
        pod = self._pods.get(field_raw(top, "Pod"))
        key, full_pods = "NodeNameToMetaVictims", False
        nodes = _decode(_META_VICTIMS, field_raw(top, key), key)
        if nodes is None:
            key, full_pods = "NodeNameToVictims", True
            nodes = _decode(_META_VICTIMS, field_raw(top, key), key)
        victims: dict[str, Victims] = {}
        for node, entry in (nodes or {}).items():
            where = f"{key}[{node!r}]"
            if full_pods:
                pods = _decode(_FULL_POD_LIST, field_raw(entry, "Pods"), f"{where}.Pods") or []
                uids = tuple(p.metadata.uid for p in pods)
            else:
                pods = _decode(_META_POD_LIST, field_raw(entry, "Pods"), f"{where}.Pods") or []
                uids = tuple(p.UID for p in pods)
            violations = _decode(_INT, field_raw(entry, "NumPDBViolations"), f"{where}.NumPDBViolations")
            victims[node] = Victims(uids, violations or 0)
        return PreemptionArgs(pod, victims)

    def encode_host_priority_list(self, result: PrioritizeResult) -> bytes:
        """Scores are ints in 0..10 already (policy.clamp_score is the only way a score is made):
        the fragments are indexed by them, and a float would void the reply anyway."""
        return self._fragments.join(result.names, result.scores)
