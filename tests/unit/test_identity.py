"""Node identity (core/identity.py): a request's names as identities, by name at no cost and by
address through the request's own IPs or the directory's, the version that makes memos stale,
pools and the series-to-node mapping."""

from __future__ import annotations

from loadext.config import NodeIdentity, parse_config
from loadext.core.addresses import normalise_address
from loadext.core.identity import ByAddress, ByName, identities_for
from loadext.core.nodes import NodeDirectory
from loadext.core.policy import DecisionTable, build_table
from loadext.core.snapshot import Sample, Snapshot

POOLS = """
prometheus: {url: "http://127.0.0.1:1"}
signals: [{name: cpu, query: c, threshold: 0.8}]
pools: [{name: batch, nodeSelector: {pool: batch}, signals: [{name: cpu, threshold: 0.9}]}]
"""


def table_with(*identities: str) -> DecisionTable:
    config = parse_config(POOLS)
    samples = {identity: {"cpu": Sample(0.5, 1.0)} for identity in identities}
    return build_table(Snapshot(samples, {"cpu": 1.0}, 1), config, 1.0)


def test_the_config_picks_the_implementation() -> None:
    assert isinstance(identities_for(NodeIdentity("node", "name")), ByName)
    assert isinstance(identities_for(NodeIdentity("instance", "address")), ByAddress)


def test_by_name_a_requests_names_are_its_identities_the_same_list() -> None:
    names, directory = ["a", "b"], NodeDirectory()
    assert ByName().of(names, {}, directory, table_with()) is names
    assert ByName().key("") is None and ByName().key("worker-1") == "worker-1"
    assert ByName().version(directory) == 0
    directory.observe(["a"])
    assert ByName().node_for("a", directory) == "a" and ByName().node_for("zz", directory) is None


def test_by_address_the_first_ip_with_data_requests_ips_first() -> None:
    directory, by_address = NodeDirectory(), ByAddress()
    directory.upsert("a", ["10.0.0.1", "10.0.0.2"])
    directory.upsert("b", ["10.0.0.3"])
    table = table_with("10.0.0.2", "10.0.0.9")
    # a: its second IP has data; b: no IP has data, its first stands; c: unknown, no identity
    assert by_address.of(["a", "b", "c"], {}, directory, table) == ["10.0.0.2", "10.0.0.3", ""]
    # a request's own IPs (non-cache mode) come before the directory's
    assert by_address.of(["a"], {"a": ("10.0.0.9:9100",)}, directory, table) == ["10.0.0.9"]
    assert by_address.key("[fd00::7]:9100") == "fd00::7" and by_address.key("not-an-ip") is None
    assert by_address.node_for("10.0.0.3", directory) == "b" and by_address.node_for("10.9.9.9", directory) is None
    assert normalise_address("10.0.0.7:9100") == "10.0.0.7"


def test_by_address_the_version_moves_when_an_ip_does() -> None:
    directory, by_address = NodeDirectory(), ByAddress()
    directory.upsert("a", ["10.0.0.1"])
    before = by_address.version(directory)
    directory.upsert("a", ["10.0.0.1"])  # the same: memos stay valid
    assert by_address.version(directory) == before
    directory.upsert("a", ["10.0.0.5"])
    assert by_address.version(directory) > before
    moved = by_address.version(directory)
    directory.observe(["b"], {"b": ("10.0.0.6",)})  # a request's IPs count too
    assert by_address.version(directory) > moved


def test_pools_are_assigned_to_each_kinds_identities() -> None:
    config, directory = parse_config(POOLS), NodeDirectory()
    directory.upsert("a", ["10.0.0.1"], {"pool": "batch"})
    directory.upsert("b", ["10.0.0.2"], {"pool": "web"})
    assert {k: p.name for k, p in ByName().pools(directory, config).items()} == {"a": "batch"}
    assert {k: p.name for k, p in ByAddress().pools(directory, config).items()} == {"10.0.0.1": "batch"}
