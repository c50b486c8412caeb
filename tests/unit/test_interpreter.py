"""The process tuning behind `loadext serve`: state frozen out of the collector after each
refresh, and cyclic garbage frozen by accident reclaimed by the periodic full collection."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator

import pytest

from loadext import interpreter


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


@pytest.fixture(autouse=True)
def _restore_interpreter() -> Iterator[None]:
    interval = sys.getswitchinterval()
    yield
    gc.unfreeze()
    sys.setswitchinterval(interval)


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_settle_freezes_the_state_and_the_full_collection_reclaims_frozen_cycles() -> None:
    now = [0.0]
    state = interpreter.LongLivedState(full_every=600, clock=lambda: now[0])
    gc.collect()
    alive = Node()
    garbage = cycle()
    gc.freeze()  # as if the cycle became garbage after a settle had frozen it
    state.settle()
    assert gc.get_freeze_count() > 0
    gc.collect()
    assert garbage() is not None  # frozen: no ordinary collection reclaims it
    now[0] = 601.0
    state.settle()  # ten minutes on: unfreeze, collect everything, freeze again
    assert garbage() is None
    assert alive.other is None and gc.get_freeze_count() > 0


def test_settle_collects_young_cycles_before_freezing_them() -> None:
    state = interpreter.LongLivedState(full_every=600, clock=lambda: 0.0)
    gc.collect()
    garbage = cycle()
    state.settle()
    assert garbage() is None


def test_tune_for_latency_shortens_the_switch_interval() -> None:
    interpreter.tune_for_latency()
    assert sys.getswitchinterval() == pytest.approx(interpreter.SWITCH_INTERVAL)
