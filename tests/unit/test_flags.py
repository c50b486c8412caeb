"""serve's flags are declared once (config/serving.py): each default agrees with its flag,
--help and docs/cli.md, and the parsed namespace is read back into the same dataclasses."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
import yaml

from loadext.cli import build_parser
from loadext.config.flags import Flag, flags_of
from loadext.config.serving import ConfigSource, Limits, ServeOptions, Shutdown

ROOT = Path(__file__).resolve().parents[2]
FLAGS = [(group, name, spec) for _, _, group in ServeOptions.groups() for name, spec in flags_of(group)]


def serve_parser() -> argparse.ArgumentParser:
    action = next(a for a in build_parser()._actions if a.dest == "command")
    return action.choices["serve"]  # type: ignore[index,no-any-return]


def cli_synopsis() -> str:
    text = (ROOT / "docs" / "cli.md").read_text()
    start = text.index("loadext serve (")
    return " ".join(text[start : text.index("loadext check-config", start)].split())


@pytest.mark.parametrize(("group", "name", "spec"), FLAGS, ids=[spec.name for _, _, spec in FLAGS])
def test_each_default_is_written_once_and_shown_as_declared(group: type, name: str, spec: Flag) -> None:
    default = group.__dataclass_fields__[name].default  # type: ignore[attr-defined]
    action = next(a for a in serve_parser()._actions if spec.name in a.option_strings)
    assert action.default == default  # what argparse gives when the flag is not typed
    if spec.shown is not None:
        assert spec.parse is not None and spec.parse(spec.shown) == default
        assert f"{spec.name} {spec.shown}" in cli_synopsis()
        assert action.help is not None and action.help.endswith(f"(default {spec.shown})")
    else:
        assert spec.name in cli_synopsis()


def test_every_serve_flag_is_declared_in_a_group() -> None:
    declared = {spec.name for _, _, spec in FLAGS}
    shown = {option for action in serve_parser()._actions for option in action.option_strings}
    assert shown - {"-h", "--help", "--log-level", "--log-format"} == declared


def test_parsed_flags_read_back_into_the_groups() -> None:
    args = build_parser().parse_args(
        ["serve", "--config", "c.yaml", "--header-timeout", "7s", "--shutdown-delay", "0s"]
    )
    options = ServeOptions.from_args(args)
    assert options == ServeOptions(
        source=ConfigSource(file="c.yaml"), limits=Limits(header_timeout=7.0), shutdown=Shutdown(delay=0.0)
    )
    assert ServeOptions.from_args(build_parser().parse_args(["serve", "--configmap", "ns/cm"])).source.configmap_ref


def test_the_charts_flag_values_default_to_the_flags_defaults() -> None:
    """A value the chart passes as `--flag={{ .Values.key }}` defaults to what the flag does."""
    template = (ROOT / "charts" / "loadext" / "templates" / "loadext.yaml").read_text()
    values = yaml.safe_load((ROOT / "charts" / "loadext" / "values.yaml").read_text())
    passed = re.findall(r"- (--[a-z-]+)=\{\{ \.Values\.(\w+) \}\}", template)
    shown = {spec.name: spec.shown for _, _, spec in FLAGS}
    serve_flags = [(name, key) for name, key in passed if name in shown]
    assert serve_flags, "the chart passes no serve flag from its values"
    for name, key in serve_flags:
        assert str(values[key]) == shown[name], name
