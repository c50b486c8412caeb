"""Reading YAML into config values: a loader that keeps every key's line, a reader for one
mapping that records errors instead of stopping at the first, and the converters that check a
value and say what is wrong with it. loader.py reads the document with these."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from typing import Any, TypeVar

import yaml

from loadext.config.promql import syntax_error
from loadext.config.schema import FieldError, default_of, key_of
from loadext.config.units import parse_duration, quantity

T = TypeVar("T")

# --- YAML with line numbers -------------------------------------------------------------------


class LineDict(dict[str, Any]):
    """A mapping that remembers the line of each key, so errors can point at it, and where each
    value starts (line, column), for errors inside a value such as a query."""

    line: int = 0
    lines: dict[str, int]
    starts: dict[str, tuple[int, int | None]]


class LineList(list[Any]):
    line: int = 0
    lines: list[int]


class LineLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> LineDict:
    mapping = LineDict()
    mapping.line = node.start_mark.line + 1
    mapping.lines = {}
    mapping.starts = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise yaml.MarkedYAMLError(problem=f"key {key!r} is not a string", problem_mark=key_node.start_mark)
        if key in mapping:
            raise yaml.MarkedYAMLError(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.lines[key] = line
        mark = value_node.start_mark
        # A block scalar (query: >-) starts on the line after its indicator, at its indentation.
        folded = isinstance(value_node, yaml.ScalarNode) and value_node.style in ("|", ">")
        mapping.starts[key] = (mark.line + 2, None) if folded else (mark.line + 1, mark.column + 1)
    return mapping


def _construct_sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> LineList:
    seq = LineList(loader.construct_object(child, deep=True) for child in node.value)
    seq.line = node.start_mark.line + 1
    seq.lines = [child.start_mark.line + 1 for child in node.value]
    return seq


LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_sequence)


# --- field reader ------------------------------------------------------------------------------


class Section:
    """Reads the keys of one mapping, recording errors instead of stopping at the first."""

    def __init__(self, data: Any, path: str, errors: list[FieldError], line: int | None) -> None:
        self.path = path
        self.errors = errors
        self.line = getattr(data, "line", line)
        self.valid = isinstance(data, dict)
        self.absent = data is None
        if data is not None and not self.valid:
            self.errors.append(FieldError(path or "<document>", self.line, "must be a mapping"))
        self.data: dict[str, Any] = data if self.valid else {}
        self.lines: dict[str, int] = getattr(data, "lines", {}) if self.valid else {}
        self.seen: set[str] = set()

    def child_path(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> None:
        self.errors.append(FieldError(self.child_path(key), self.lines.get(key, self.line), message))

    def value_error(self, key: str, message: str) -> None:
        """An error inside the key's value, pointed at where the value starts."""
        line, column = getattr(self.data, "starts", {}).get(key, (self.lines.get(key, self.line), None))
        self.errors.append(FieldError(self.child_path(key), line, message, column))

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def setting(self, cls: type, name: str, convert: Callable[[Any], T], default: Any = None) -> T:
        """The field `name` of the config dataclass `cls`, read at its key (the last part of a
        dotted one: the caller holds the section), defaulting to the dataclass's default
        unless `default` (one that depends on other settings) is given."""
        key = key_of(cls, name).rpartition(".")[2]
        value: T = self.get(key, convert, default_of(cls, name) if default is None else default)
        return value

    def get(self, key: str, convert: Callable[[Any], T], default: T) -> T:
        self.seen.add(key)
        raw = self.data.get(key)
        if raw is None:
            return default
        try:
            return convert(raw)
        except (TypeError, ValueError) as exc:
            self.error(key, str(exc))
            return default

    def section(self, key: str) -> Section:
        self.seen.add(key)
        return Section(self.data.get(key), self.child_path(key), self.errors, self.lines.get(key, self.line))

    def raw(self, key: str) -> Any:
        self.seen.add(key)
        return self.data.get(key)

    def name_by(self, label: str) -> None:
        """Errors below an entry of a list name it by `label` (signals[cpu]) rather than by index,
        once the entry's own name is known."""
        self.path = f"{self.path.rpartition('[')[0]}[{label}]"

    def finish(self) -> None:
        for key in self.data:
            if key not in self.seen:
                known = ", ".join(sorted(self.seen))
                close = difflib.get_close_matches(str(key), sorted(self.seen), n=1, cutoff=0.6)
                hint = f"did you mean {close[0]!r}? " if close else ""
                self.error(key, f"unknown key; {hint}(known keys here: {known})")


def string(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be a non-empty string")
    return value


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def numeric(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        percent = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*", value) if isinstance(value, str) else None
        if percent:
            raise ValueError(f"must be a number, got {value!r}: write {float(percent.group(1)) / 100:g}, a ratio")
        raise ValueError(f"must be a number, got {value!r}")
    return float(value)


def promql_or_off(value: Any) -> str:
    """A PromQL query, or "" for off."""
    if not isinstance(value, str):
        raise ValueError('must be a PromQL query, or "" to turn it off')
    problem = syntax_error(value) if value.strip() else None
    if problem is not None:
        raise ValueError(f"PromQL does not parse: {problem}")
    return value.strip()


def positive_duration(value: Any) -> float:
    seconds = parse_duration(value)
    if seconds <= 0:
        raise ValueError("must be greater than zero")
    return seconds


def ratio(value: Any) -> float:
    number = numeric(value)
    if 1 < number <= 100:
        raise ValueError(f"must be a ratio in (0, 1], got {number:g}: for {number:g}% write {number / 100:g}")
    if not 0 < number <= 1:
        raise ValueError(f"must be a ratio in (0, 1], got {number:g}")
    return number


def weight(value: Any) -> float:
    number = numeric(value)
    if number < 0:
        raise ValueError(f"must be zero or positive, got {number}")
    return number


def choice(*allowed: str) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if value not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}; got {value!r}")
        return str(value)

    return convert


def url(value: Any) -> str:
    text = string(value)
    if not re.match(r"^https?://[^/\s]+", text):
        raise ValueError(f"must be an http:// or https:// URL, got {text!r}")
    return text.rstrip("/")


def quantity_value(value: Any) -> float:
    parsed = quantity(value)
    if parsed is None or parsed < 0:
        raise ValueError(f"must be a Kubernetes quantity such as 250m or 200Mi, got {value!r}")
    return parsed


def count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"must be a whole number >= 0, got {value!r}")
    return value


def positive_count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"must be a whole number >= 1, got {value!r}")
    return value


def names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise ValueError("must be a list of names")
    return tuple(value)
