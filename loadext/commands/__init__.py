"""The one-shot commands behind `loadext check-config`, `explain` and `replay`, and the tables
they print. cli.py parses the arguments and dispatches here; each command returns its exit
code (the same codes for every command, `loadext --help` lists them)."""

EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_PROMETHEUS = 0, 1, 2, 3


class NoData(Exception):
    """Prometheus answered, but with nothing loadext can decide on."""
