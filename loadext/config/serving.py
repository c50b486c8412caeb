"""What `loadext serve` is told on its command line, one dataclass per group of flags; each
field is the flag's one declaration (flags.py). The groups travel down to the part they set:
Limits to http/limits.py, Shutdown and Ports to http/lifecycle.py, TLSFiles to http/tls.py,
ConfigSource to the reloaders, KubeAccess to the watches and actors.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from loadext.config.flags import (
    add_flags,
    configmap_ref,
    duration,
    flag,
    parse_listen,
    parse_size,
    positive_duration,
    positive_int,
    read_flags,
)

MiB = 1024 * 1024


@dataclass(frozen=True)
class ConfigMapRef:
    namespace: str
    name: str
    key: str  # --configmap-key's default is ConfigSource's


@dataclass(frozen=True)
class ConfigSource:
    file: str | None = flag(
        "--config",
        None,
        "YAML config file (a mounted ConfigMap key), reloaded when it changes",
        parse=str,
        metavar="FILE",
        one_of="source",
    )
    configmap: tuple[str, str] | None = flag(
        "--configmap",
        None,
        "read and watch the config in this ConfigMap through the API instead; rejected versions are also "
        "reported as Events on it",
        parse=configmap_ref,
        one_of="source",
    )
    configmap_key: str = flag(
        "--configmap-key", "config.yaml", "key of the ConfigMap", parse=str, shown="config.yaml", metavar="KEY"
    )
    reload_interval: float = flag(
        "--reload-interval",
        2.0,
        "how often the config file (and the TLS files) are checked for changes",
        parse=duration,
        shown="2s",
    )

    @property
    def configmap_ref(self) -> ConfigMapRef | None:
        return None if self.configmap is None else ConfigMapRef(*self.configmap, self.configmap_key)


@dataclass(frozen=True)
class Ports:
    listen: tuple[str, int] = flag(
        "--listen", ("0.0.0.0", 8888), "HOST:PORT to listen on", parse=parse_listen, shown="0.0.0.0:8888"
    )
    path_prefix: str = flag(
        "--path-prefix", "/", "path before the verbs, matching urlPrefix", parse=str, shown="/", metavar="PATH"
    )
    metrics_listen: tuple[str, int] | None = flag(
        "--metrics-listen",
        None,
        "also serve /metrics, /healthz and /readyz over plain HTTP on HOST:PORT (for Prometheus and kubelet "
        "probes when the main port requires client certificates)",
        parse=parse_listen,
    )


@dataclass(frozen=True)
class TLSFiles:
    cert: str | None = flag(
        "--tls-cert",
        None,
        "serve HTTPS with this certificate (PEM); reloaded when it changes",
        parse=str,
        metavar="FILE",
    )
    key: str | None = flag("--tls-key", None, "the certificate's private key (PEM)", parse=str, metavar="FILE")
    client_ca: str | None = flag(
        "--tls-client-ca", None, "require client certificates signed by this CA (mTLS)", parse=str, metavar="FILE"
    )


@dataclass(frozen=True)
class KubeAccess:
    kubeconfig: str | None = flag(
        "--kubeconfig",
        None,
        "kubeconfig for the API: bind, --configmap, Node and Pod watches (default: in-cluster service account "
        "when running in a pod)",
        parse=str,
        metavar="FILE",
    )
    watch_nodes: bool = flag(
        "--watch-nodes",
        False,
        "list/watch Nodes (address identities and pool labels with nodeCacheCapable: true; on by itself when "
        "herdGuard is enabled at start)",
    )
    requeue_stranded: bool = flag(
        "--requeue-stranded",
        False,
        "when a node loadext refused becomes acceptable again for a pod its filter left without any node, "
        "annotate that Node (loadext.io/reopened) so kube-scheduler retries the pod at once instead of after "
        "up to 5 minutes; needs patch on nodes (docs/security.md)",
    )

    @property
    def wanted(self) -> bool:
        """Whether a flag asks for the API (the config may ask too: bind, the herd guard)."""
        return bool(self.kubeconfig or self.watch_nodes or self.requeue_stranded)


@dataclass(frozen=True)
class Limits:
    """What a slow, greedy or hostile client may cost (http/limits.py says how each holds)."""

    max_body_size: int = flag(
        "--max-body-size",
        256 * MiB,
        "largest request body accepted (non-cache requests carry ~7.5 KB per node)",
        parse=parse_size,
        shown="256Mi",
    )
    header_timeout: float = flag(
        "--header-timeout",
        5.0,
        "time from a request's first byte to its last header",
        parse=positive_duration,
        shown="5s",
    )
    body_timeout: float = flag(
        "--body-timeout", 10.0, "time to read a request body", parse=positive_duration, shown="10s"
    )
    max_concurrent: int = flag(
        "--max-concurrent-requests",
        64,
        "extender requests read or answered at once; more get 503 + Retry-After",
        parse=positive_int,
        shown="64",
    )
    max_inflight_bytes: int = flag(
        "--max-inflight-bytes",
        1024 * MiB,
        "sum of the bodies of concurrent requests (unknown lengths count as --max-body-size); more get 503 + "
        "Retry-After",
        parse=parse_size,
        shown="1Gi",
    )
    body_memory: int = flag(
        "--body-memory",
        64 * MiB,
        "bodies of 1Mi and over are read and answered while they sum to at most this; the rest wait their turn "
        "unread (503 + Retry-After after --body-timeout), so RSS stays near 3x it",
        parse=parse_size,
        shown="64Mi",
    )


@dataclass(frozen=True)
class Shutdown:
    """On SIGTERM (http/lifecycle.py); both must fit in the pod's terminationGracePeriodSeconds."""

    delay: float = flag(
        "--shutdown-delay",
        5.0,
        "keep serving this long after readiness turns false, while endpoints update",
        parse=duration,
        shown="5s",
    )
    timeout: float = flag(
        "--shutdown-timeout", 15.0, "then wait this long at most for requests in flight", parse=duration, shown="15s"
    )


@dataclass(frozen=True)
class ServeOptions:
    """`loadext serve`'s flags, by group; the titles are --help's."""

    source: ConfigSource = field(default_factory=ConfigSource, metadata={"title": "where the config comes from"})
    ports: Ports = field(default_factory=Ports, metadata={"title": "listening"})
    tls: TLSFiles = field(
        default_factory=TLSFiles,
        metadata={"title": "HTTPS (--tls-cert and --tls-key together; with --tls-client-ca, mTLS)"},
    )
    kube: KubeAccess = field(default_factory=KubeAccess, metadata={"title": "the Kubernetes API"})
    limits: Limits = field(
        default_factory=Limits, metadata={"title": "limits (HTTP 413, 408 and 503 with a JSON body)"}
    )
    shutdown: Shutdown = field(
        default_factory=Shutdown, metadata={"title": "shutdown on SIGTERM (fit both in terminationGracePeriodSeconds)"}
    )

    @staticmethod
    def groups() -> list[tuple[str, str, type]]:
        """(field, --help title, dataclass) of each group, in --help's order."""
        return [
            (item.name, item.metadata["title"], item.default_factory)  # type: ignore[misc]
            for item in dataclasses.fields(ServeOptions)
        ]

    @staticmethod
    def add_flags(parser: Any) -> None:
        for _, title, group in ServeOptions.groups():
            add_flags(parser, title, group)

    @staticmethod
    def from_args(args: Any) -> ServeOptions:
        return ServeOptions(**{name: read_flags(group, args) for name, _, group in ServeOptions.groups()})
