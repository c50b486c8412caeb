"""sources/readiness.py: ready once refreshed and every watch has its initial list, and past
the bound without a list that never comes, saying so (the serve test checks /readyz itself)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from loadext.sources.readiness import Readiness


async def test_ready_waits_for_the_first_round_and_every_initial_list_then_gives_up_on_a_stuck_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    refreshed = False
    reported: list[bool] = []
    readiness = Readiness(lambda: refreshed, slow=0.05, bound=0.3)
    nodes = readiness.tracked("nodes", reported.append)
    readiness.tracked("pods", reported.append)
    assert readiness.waiting_for() == [
        "the first refresh round",
        "the nodes watch's initial list",
        "the pods watch's initial list",
    ]
    refreshed = True
    nodes(False)  # a failed list syncs nothing
    nodes(True)
    assert reported == [False, True] and readiness.waiting_for() == ["the pods watch's initial list"]
    with caplog.at_level(logging.INFO):
        await asyncio.wait_for(readiness.supervise(), timeout=5)
    assert readiness.waiting_for() == []
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "still waiting for the initial list of the pods watch after 0.05 s",
        "ready without the initial list of the pods watch after 0.3 s: it keeps retrying",
    ]
