"""The one-shot commands behind `loadext check-config`, `explain` and `replay`, and the tables
they print. cli.py parses the arguments and dispatches here; each command returns its exit
code (the same codes for every command, `loadext --help` lists them)."""

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_PROMETHEUS, EXIT_KUBERNETES = 0, 1, 2, 3, 4


class NoData(Exception):
    """Prometheus answered, but with nothing loadext can decide on."""


class UsageError(Exception):
    """The arguments cannot work together (exit 2, as argparse's own usage errors)."""
