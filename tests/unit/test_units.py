"""config.units.quantity against the kubernetes client's parse_quantity, the parser it replaced
in the core (which must not import the client): same value, or both refuse, on every input."""

from __future__ import annotations

from decimal import InvalidOperation

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity

from loadext.config.units import quantity

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


def client_quantity(value: object) -> float | None:
    try:
        return float(parse_quantity(str(value)))
    except (ValueError, InvalidOperation, TypeError):
        return None


@pytest.mark.parametrize(
    "value",
    [
        "500m", "1Gi", "2", "1.5", "0.5Gi", ".5", "5.", "128974848", "129e6", "129M", "123Mi",
        "1e3", "1E3", "-1", "+2", "100n", "3u", "2k", "1Ei",
        "", "m", "1x", "1.2.3", "Gi", "1Gi ", "1Kb", "abc", "--1", "1e", "0x10",
        2, 1.5, 0,
    ],
)  # fmt: skip
def test_same_as_the_kubernetes_client(value: object) -> None:
    assert quantity(value) == client_quantity(value)


@given(
    number=st.decimals(min_value=-(10**6), max_value=10**6, allow_nan=False, allow_infinity=False, places=3),
    suffix=st.sampled_from(SUFFIXES),
)
def test_same_as_the_kubernetes_client_on_generated_quantities(number: object, suffix: str) -> None:
    text = f"{number}{suffix}"
    assert quantity(text) == pytest.approx(client_quantity(text))


def test_absent_values_and_booleans_are_no_quantity() -> None:
    assert quantity(None) is None
    assert quantity(True) is None  # YAML's `yes`: the client would read str(True), and refuse it too
    assert client_quantity(True) is None


def test_whitespace_is_refused_as_kube_apiserver_does() -> None:
    """The one divergence: the Python client reads "1 Gi" (its Decimal tolerates the space), Go's
    resource.ParseQuantity refuses it. The API server only ever sends canonical quantities, so
    the difference cannot reach the herd guard; loadext follows Go."""
    for text in ("1 Gi", " 1Gi"):
        assert client_quantity(text) == 2**30
        assert quantity(text) is None
