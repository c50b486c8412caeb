"""kube.bind, one function, with a stand-in for CoreV1Api: success, idempotent retry, conflicts;
and the real client against a port that takes the connection and never answers, or refuses it.
The real API server binds in the end-to-end suite."""

from __future__ import annotations

import socket
import time
from types import SimpleNamespace
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from harness.prometheus import free_port
from loadext.http.protocol import BindingArgs
from loadext.sources.kube import API_TIMEOUT, bind

ARGS = BindingArgs(pod_name="ingest-0", pod_namespace="analytics", pod_uid="uid-1", node="ceph1")


class FakeCoreV1:
    def __init__(self, create_status: int | None, bound_to: str | None = "ceph1", uid: str = "uid-1") -> None:
        self.create_status = create_status
        self.pod = SimpleNamespace(metadata=SimpleNamespace(uid=uid), spec=SimpleNamespace(node_name=bound_to))
        self.bodies: list[Any] = []

    def create_namespaced_pod_binding(self, name: str, namespace: str, body: Any, **kwargs: Any) -> None:
        self.bodies.append((name, namespace, body, kwargs))
        if self.create_status is not None:
            raise ApiException(status=self.create_status, reason="Conflict" if self.create_status == 409 else "Err")

    def read_namespaced_pod(self, name: str, namespace: str, **kwargs: Any) -> Any:
        return self.pod


def test_bind_creates_the_binding_with_the_uid_precondition() -> None:
    api = FakeCoreV1(create_status=None)
    assert bind(api, ARGS) == ""
    name, namespace, body, kwargs = api.bodies[0]
    assert (name, namespace) == ("ingest-0", "analytics")
    assert body.metadata.uid == "uid-1" and body.target.kind == "Node" and body.target.name == "ceph1"
    assert kwargs == {"_preload_content": False, "_request_timeout": API_TIMEOUT}


def test_retry_after_a_successful_bind_is_success() -> None:
    assert bind(FakeCoreV1(create_status=409, bound_to="ceph1"), ARGS) == ""


def test_pod_bound_elsewhere_or_replaced_is_an_error() -> None:
    assert "already bound to ceph2" in bind(FakeCoreV1(create_status=409, bound_to="ceph2"), ARGS)
    assert "has UID uid-2" in bind(FakeCoreV1(create_status=409, uid="uid-2"), ARGS)
    assert "failed: 500" in bind(FakeCoreV1(create_status=500), ARGS)


def _api(port: int) -> Any:
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    configuration.retries = False
    return client.CoreV1Api(client.ApiClient(configuration))


def test_an_api_server_that_never_answers_or_refuses_is_an_error_in_time() -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # the kernel accepts; nobody answers
        started = time.monotonic()
        error = bind(_api(silent.getsockname()[1]), ARGS, timeout=0.3)
        assert time.monotonic() - started < 5
    assert error == "binding analytics/ingest-0 to ceph1 failed: no answer within 0.3s"
    assert bind(_api(free_port()), ARGS) == "binding analytics/ingest-0 to ceph1 failed: connection refused"
