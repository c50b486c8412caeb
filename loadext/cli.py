"""Command line: argparse and dispatch for serve, check-config, explain and replay.

Exit codes (the same for every command; `loadext --help` lists them): 0 ok; 1 invalid config
or unreadable input; 2 usage error; 3 Prometheus failed a query or had no data for it; 4 the
Kubernetes API failed (a --kubeconfig that does not load, an API server that cannot be reached). Every
failure is one line on stderr, never a traceback. The commands themselves are in commands/.
"""

from __future__ import annotations

import argparse
import sys

from loadext import __version__
from loadext.commands import EXIT_INVALID, EXIT_KUBERNETES, EXIT_PROMETHEUS, EXIT_USAGE, NoData, UsageError
from loadext.commands import check_config as check_config_command
from loadext.commands import explain as explain_command
from loadext.commands import rebalance as rebalance_command
from loadext.commands import replay as replay_command
from loadext.commands import serve as serve_command
from loadext.config import ConfigError
from loadext.config.flags import duration
from loadext.config.serving import ServeOptions
from loadext.logs import configure as configure_logs
from loadext.sources.kube import KubeError
from loadext.sources.query_error import QueryError

EXAMPLES = """examples:
  loadext check-config config.yaml                       validate a config, its PromQL included
  loadext check-config config.yaml --prometheus http://prometheus:9090   and run each query once
  loadext serve --config config.yaml --listen 127.0.0.1:8888
  loadext serve --configmap loadext/loadext-config --watch-nodes --log-format json
  loadext explain --config config.yaml                   every node's values and verdict, from Prometheus
  loadext explain --url http://loadext:8888 --pod default/web-0   a pod's last decisions, and why
  loadext replay --config candidate.yaml --current config.yaml --since 6h
  loadext rebalance --once --config config.yaml --kubeconfig ~/.kube/config --dry-run   what it would move now

exit codes: 0 ok; 1 invalid config or unreadable input; 2 usage error;
            3 Prometheus failed a query, or had no data for it; 4 the Kubernetes API failed
global options (--log-level, --log-format) go before or after the command."""


def _global_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """On the top parser with defaults, and on each command without, so that they are accepted
    after the command too and only override when given there."""
    parser.add_argument(
        "--log-level",
        default="info" if defaults else argparse.SUPPRESS,
        choices=["debug", "info", "warning", "error"],
        help="the level of loadext's own log lines (default info)",
    )
    parser.add_argument(
        "--log-format",
        default="text" if defaults else argparse.SUPPRESS,
        choices=["text", "json"],
        help="text for people, json (one object per line) for log pipelines (default text)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loadext",
        description="Load-aware scheduling extender for kube-scheduler.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"loadext {__version__}")
    _global_options(parser, defaults=True)
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, help_text: str, examples: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog="examples:\n" + examples,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _global_options(sub, defaults=False)
        return sub

    serve = command(
        "serve",
        "run the extender HTTP server",
        "  loadext serve --config config.yaml --listen 127.0.0.1:8888\n"
        "  loadext serve --configmap loadext/loadext-config --watch-nodes --log-format json",
    )
    ServeOptions.add_flags(serve)

    check = command(
        "check-config",
        "validate a config file, every signal's PromQL included; with --prometheus also run each query "
        "once and check what it returns (exit 1 on errors, 3 if Prometheus fails a query)",
        "  loadext check-config config.yaml\n  loadext check-config config.yaml --prometheus http://prometheus:9090",
    )
    check.add_argument("file", help="the YAML config file (what the ConfigMap's config.yaml key holds)")
    check.add_argument(
        "--prometheus",
        metavar="URL",
        help="also run each query once against this Prometheus (instead of prometheus.url) and report "
        "series, the node-identity label and the value range",
    )

    explain = command(
        "explain",
        "show every node's values, verdict and score: from one Prometheus query (--config) or from "
        "a running loadext (--url), or a pod's last decisions (--url with --pod)",
        "  loadext explain --config config.yaml --node worker-3\n"
        "  loadext explain --url http://127.0.0.1:8888 --output json\n"
        "  loadext explain --url http://127.0.0.1:8888 --pod default/web-0",
    )
    where = explain.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", help="query Prometheus once with this config")
    where.add_argument("--url", help="ask a running loadext, e.g. http://127.0.0.1:8888")
    explain.add_argument("--pod", metavar="NAMESPACE/NAME", help="with --url: that pod's last filter/prioritize")
    explain.add_argument("--output", choices=["table", "json"], default="table")
    explain.add_argument("--kubeconfig", help="list Nodes from this cluster (for address identities)")
    explain.add_argument(
        "--node",
        action="append",
        default=[],
        help="a node name to include even if no series names it (repeatable)",
    )
    replay = command(
        "replay",
        "what a candidate config would have refused and preferred over Prometheus history, "
        "side by side with the config in force",
        "  loadext replay --config candidate.yaml --current config.yaml --since 6h --step 1m --chart replay.png",
    )
    replay.add_argument("--config", required=True, help="the candidate config")
    replay.add_argument("--current", help="the config in force (default: the candidate alone)")
    replay.add_argument("--since", type=duration, default="24h", help="how far back (default 24h)")
    replay.add_argument("--step", type=duration, default="5m", help="resolution (default 5m)")
    replay.add_argument("--output", choices=["table", "json"], default="table")
    replay.add_argument("--chart", help="also draw refused nodes over time into this PNG (needs matplotlib)")
    rebalance = command(
        "rebalance",
        "one rebalancing cycle now (the server runs them by itself with rebalance.enabled): the nodes at or "
        "above evictAt, the pods that would move and where, or why not; it evicts only with "
        "rebalance.mode evict and without --dry-run (docs/rebalancing.md)",
        "  loadext rebalance --once --config config.yaml --kubeconfig ~/.kube/config --dry-run\n"
        "  loadext rebalance --once --config config.yaml --output json",
    )
    rebalance.add_argument("--once", action="store_true", required=True, help="one cycle, then exit (required)")
    rebalance.add_argument("--config", required=True, help="the config (its prometheus, signals, rebalance)")
    rebalance.add_argument("--kubeconfig", help="the cluster (default: the in-cluster service account)")
    rebalance.add_argument("--dry-run", action="store_true", help="plan and print only, whatever the config's mode")
    rebalance.add_argument(
        "--output",
        choices=["table", "json"],
        default="table",
        help="json: one object per line: node, pod (namespace/name), reason, result, target or skipped",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logs(args.log_level, args.log_format)
    try:
        if args.command == "check-config":
            return check_config_command.run(args.file, args.prometheus)
        if args.command == "explain":
            if args.url:
                return explain_command.from_url(args.url, args.pod, args.output)
            if args.pod:
                raise OSError("--pod needs --url: decisions live in the running loadext")
            return explain_command.from_prometheus(args.config, args.kubeconfig, list(args.node), args.output)
        if args.command == "rebalance":
            return rebalance_command.run(args.config, args.kubeconfig, args.dry_run, args.output)
        if args.command == "replay":
            return replay_command.run(args.config, args.current, args.since, args.step, args.output, args.chart)
        return serve_command.run(args)
    except ConfigError as exc:
        print(f"{exc.source}: invalid config", file=sys.stderr)
        for error in exc.errors:
            print(f"  {error}", file=sys.stderr)
        return EXIT_INVALID
    except QueryError as exc:
        print(f"error: prometheus query failed ({exc.kind}): {exc.detail}", file=sys.stderr)
        return EXIT_PROMETHEUS
    except (NoData, KubeError, UsageError, OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return next(code for kind, code in _EXIT_CODES if isinstance(exc, kind))


# The exit code of each failure the commands report in one line (the first that matches).
_EXIT_CODES: tuple[tuple[type[Exception], int], ...] = (
    (NoData, EXIT_PROMETHEUS),
    (KubeError, EXIT_KUBERNETES),
    (UsageError, EXIT_USAGE),
    (Exception, EXIT_INVALID),  # OSError, KeyError, ValueError: unreadable input
)
