"""The config loader against random documents: shaped like a config (real keys, wrong and right
values, at any depth) and plain garbage text. Every outcome is a Config that the extender can
run, or a ConfigError whose every entry names a field; nothing else escapes. The example count
comes from the hypothesis profile: small in CI, large with scripts/fuzz.sh."""

from __future__ import annotations

from typing import Any

import yaml
from hypothesis import event, given
from hypothesis import strategies as st

from loadext.config import ConfigError, parse_config
from loadext.config.schema import setting_keys
from loadext.core.cluster import Cluster

# Every key a document may hold (config/schema.py names them once), each at any depth.
KEYS = sorted({part.removesuffix("[]") for key in setting_keys() for part in key.split(".")})
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.sampled_from(["1s", "500ms", "-5s", "1h30m", "0s", "http://127.0.0.1:9090", "up", "cpu", "open", "x"])
    | st.sampled_from(["leastLoaded", "riskAware", "targetUtilization", "reject", "closed", "address", "name"])
    | st.text(max_size=12)
)
documents = st.recursive(
    SCALARS,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.sampled_from(KEYS), children, max_size=6),
    max_leaves=30,
)
VALID_CORE = {"prometheus": {"url": "http://127.0.0.1:9090"}, "signals": [{"name": "cpu", "query": "up"}]}


def _check(text: str) -> None:
    try:
        config = parse_config(text)
    except ConfigError as exc:
        assert exc.errors and all(e.path and e.message for e in exc.errors), exc
        event("rejected with field errors")
        return
    event("accepted and run")
    cluster = Cluster(config)  # a config that parses must run
    assert config.hash and cluster.verbs.table() is not None
    for signal in config.signals:
        assert config.query_for(signal)


@given(documents)
def test_config_shaped_documents(doc: Any) -> None:
    _check(yaml.safe_dump(doc))


@given(st.dictionaries(st.sampled_from(KEYS), documents, max_size=6))
def test_valid_core_with_random_extras(extra: dict[str, Any]) -> None:
    _check(yaml.safe_dump({**VALID_CORE, **extra}))


@given(st.text(max_size=200))
def test_garbage_text(text: str) -> None:
    _check(text)
