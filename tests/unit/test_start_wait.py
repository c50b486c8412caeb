"""serve's start while its ConfigMap cannot be read: which failures are worth waiting out
(kube.read_configmap with a stand-in CoreV1Api), and what the ports answer meanwhile
(starting.read_when_answered with a stand-in read). The real API server's outage is in
tests/faults/test_kube_faults.py."""

from __future__ import annotations

import asyncio
import json
import math
import time
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from harness.prometheus import free_port
from loadext.http import starting
from loadext.sources.kube import REFUSAL_WAITED, KubeError, read_configmap, worth_waiting


class RefusingCoreV1:
    api_client = SimpleNamespace(configuration=SimpleNamespace(host="https://127.0.0.1:6443"))

    def __init__(self, error: Exception) -> None:
        self.error = error

    def read_namespaced_config_map(self, *args: Any, **kwargs: Any) -> None:
        raise self.error


@pytest.mark.parametrize(
    ("error", "waited"),
    [
        (urllib3.exceptions.NewConnectionError(None, "refused"), math.inf),
        (urllib3.exceptions.ReadTimeoutError(None, "/", "timed out"), math.inf),
        (ApiException(status=503, reason="Service Unavailable"), math.inf),
        (ApiException(status=500, reason="Internal Server Error"), math.inf),
        (ApiException(status=429, reason="Too Many Requests"), math.inf),
        (ApiException(status=403, reason="Forbidden"), REFUSAL_WAITED),
        (ApiException(status=404, reason="Not Found"), REFUSAL_WAITED),
        (ApiException(status=401, reason="Unauthorized"), REFUSAL_WAITED),
    ],
)
def test_no_answer_is_waited_out_and_a_refusal_briefly(error: Exception, waited: float) -> None:
    with pytest.raises(KubeError) as raised:
        read_configmap(RefusingCoreV1(error), "ops", "loadext", "config.yaml")
    assert str(raised.value).startswith("reading ConfigMap ops/loadext failed: ")
    assert worth_waiting(raised.value) == waited


def test_a_missing_key_or_file_is_not_waited_out() -> None:
    assert worth_waiting(KeyError("ConfigMap ops/loadext has no key 'config.yaml'")) == 0
    assert worth_waiting(OSError("config.yaml: no such file")) == 0


async def test_while_waiting_it_is_alive_not_ready_and_says_why_then_lets_go_of_the_port() -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    outage = {"left": 2}

    def read() -> str:
        if outage["left"]:
            outage["left"] -= 1
            raise KubeError("reading ConfigMap ops/loadext failed: connection refused to https://x", passing=True)
        return "the config"

    waiting = asyncio.create_task(starting.read_when_answered(read, worth_waiting, [("127.0.0.1", port, None)], 5))
    async with aiohttp.ClientSession() as session:
        for _ in range(100):  # until the port is taken
            try:
                async with session.get(url + "/healthz") as alive:
                    assert alive.status == 200
                    break
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.02)
        async with session.get(url + "/readyz") as ready:
            assert ready.status == 503
            assert await ready.text() == (
                "waiting for the config: reading ConfigMap ops/loadext failed: connection refused to https://x\n"
            )
        async with session.post(url + "/filter", data=b"{}") as verb:
            assert verb.status == 503
            error = json.loads(await verb.read())["error"]
            assert error.startswith("loadext is starting, waiting for its config: reading ConfigMap ops/loadext")
        assert await asyncio.wait_for(waiting, 10) == "the config"
        assert outage["left"] == 0
        with pytest.raises(aiohttp.ClientConnectionError):  # free for the server proper
            await session.get(url + "/healthz")


async def test_a_failure_not_worth_waiting_for_ends_the_wait_at_once() -> None:
    calls = []

    def read() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise KubeError("reading ConfigMap ops/loadext failed: 503 Service Unavailable (x)", passing=True)
        raise KeyError("ConfigMap ops/loadext has no key 'config.yaml'")

    with pytest.raises(KeyError, match="no key"):
        await asyncio.wait_for(
            starting.read_when_answered(read, worth_waiting, [("127.0.0.1", free_port(), None)], 5), 10
        )
    assert len(calls) == 2


async def test_a_refusal_is_believed_once_it_has_held_for_its_budget_counted_from_its_first() -> None:
    """An outage (waited out however long), then refusals (an API server just started): the
    refusals' budget counts from the first refusal, not from the start of the outage."""
    calls: list[float] = []

    def read() -> str:
        calls.append(time.monotonic())
        if len(calls) <= 2:
            raise KubeError("reading ConfigMap ops/loadext failed: connection refused to x", passing=True)
        raise KubeError("reading ConfigMap ops/loadext failed: 403 Forbidden (x)")

    def budget(exc: Exception) -> float:
        return math.inf if isinstance(exc, KubeError) and exc.passing else 2.5

    started = time.monotonic()
    with pytest.raises(KubeError, match="403 Forbidden"):
        await asyncio.wait_for(starting.read_when_answered(read, budget, [("127.0.0.1", free_port(), None)], 5), 30)
    # refused first at 3 s, past the budget if counted from the outage's start, and tried again
    # 4 s later: believed there
    assert len(calls) == 4
    assert calls[2] - calls[0] >= 2.5 and calls[3] - calls[2] >= 2.5
    assert time.monotonic() - started < 20
