"""Command line: serve, check-config, explain, replay.

Exit codes (the same for every command; `loadext --help` lists them): 0 ok; 1 invalid config
or unreadable input; 2 usage error; 3 Prometheus failed a query or had no data for it. Every
failure is one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace
from typing import Any

import orjson

from loadext import __version__
from loadext.config import ConfigError, load_config, parse_duration
from loadext.logs import configure as configure_logs
from loadext.sources.prometheus import PrometheusSource, QueryError, QueryResult

log = logging.getLogger("loadext")


def parse_listen(value: str) -> tuple[str, int]:
    """'HOST:PORT', '[::1]:PORT' or ':PORT' (all interfaces)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def parse_size(value: str) -> int:
    """'256Mi', '64M', '1Gi' or plain bytes."""
    units = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "K": 1000, "M": 1000**2, "G": 1000**3}
    for suffix, factor in units.items():
        if value.endswith(suffix) and value[: -len(suffix)].isdigit():
            return int(value[: -len(suffix)]) * factor
    if value.isdigit():
        return int(value)
    raise argparse.ArgumentTypeError(f"{value!r} is not a size such as 256Mi")


def _duration(value: str) -> float:
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _positive_duration(value: str) -> float:
    seconds = _duration(value)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be longer than 0s")
    return seconds


def _positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of at least 1")
    return int(value)


def _configmap_ref(value: str) -> tuple[str, str]:
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{value!r} is not NAMESPACE/NAME")
    return namespace, name


EXIT_OK, EXIT_INVALID, EXIT_USAGE, EXIT_PROMETHEUS = 0, 1, 2, 3

EXAMPLES = """examples:
  loadext check-config config.yaml                       validate a config, its PromQL included
  loadext check-config config.yaml --prometheus http://prometheus:9090   and run each query once
  loadext serve --config config.yaml --listen 127.0.0.1:8888
  loadext serve --configmap loadext/loadext-config --watch-nodes --log-format json
  loadext explain --config config.yaml                   every node's values and verdict, from Prometheus
  loadext explain --url http://loadext:8888 --pod default/web-0   a pod's last decisions, and why
  loadext replay --config candidate.yaml --current config.yaml --since 6h

exit codes: 0 ok; 1 invalid config or unreadable input; 2 usage error;
            3 Prometheus failed a query, or had no data for it
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
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", help="YAML config file (a mounted ConfigMap key), reloaded when it changes")
    source.add_argument(
        "--configmap",
        type=_configmap_ref,
        metavar="NAMESPACE/NAME",
        help="read and watch the config in this ConfigMap through the API instead; "
        "rejected versions are also reported as Events on it",
    )
    serve.add_argument("--configmap-key", default="config.yaml", help="key of the ConfigMap (default config.yaml)")
    serve.add_argument(
        "--listen",
        type=parse_listen,
        default=("0.0.0.0", 8888),
        help="HOST:PORT to listen on (default 0.0.0.0:8888)",
    )
    serve.add_argument("--path-prefix", default="/", help="path before the verbs, matching urlPrefix (default /)")
    serve.add_argument(
        "--metrics-listen",
        type=parse_listen,
        help="also serve /metrics, /healthz and /readyz over plain HTTP on HOST:PORT (for Prometheus and "
        "kubelet probes when the main port requires client certificates)",
    )
    limits = serve.add_argument_group("limits (HTTP 413, 408 and 503 with a JSON body)")
    limits.add_argument(
        "--max-body-size",
        type=parse_size,
        default="256Mi",
        help="largest request body accepted (default 256Mi; non-cache requests carry ~7.5 KB per node)",
    )
    limits.add_argument(
        "--header-timeout",
        type=_positive_duration,
        default="5s",
        help="time from a request's first byte to its last header (default 5s)",
    )
    limits.add_argument(
        "--body-timeout", type=_positive_duration, default="10s", help="time to read a request body (default 10s)"
    )
    limits.add_argument(
        "--max-concurrent-requests",
        type=_positive_int,
        default=64,
        help="extender requests read or answered at once; more get 503 + Retry-After (default 64)",
    )
    limits.add_argument(
        "--max-inflight-bytes",
        type=parse_size,
        default="1Gi",
        help="sum of the bodies of concurrent requests (unknown lengths count as --max-body-size); "
        "more get 503 + Retry-After (default 1Gi)",
    )
    limits.add_argument(
        "--body-memory",
        type=parse_size,
        default="64Mi",
        help="bodies of 1Mi and over are read and answered while they sum to at most this; the rest wait "
        "their turn unread (503 + Retry-After after --body-timeout), so RSS stays near 3x it (default 64Mi)",
    )
    lifecycle = serve.add_argument_group("shutdown on SIGTERM (fit both in terminationGracePeriodSeconds)")
    lifecycle.add_argument(
        "--shutdown-delay",
        type=_duration,
        default="5s",
        help="keep serving this long after readiness turns false, while endpoints update (default 5s)",
    )
    lifecycle.add_argument(
        "--shutdown-timeout",
        type=_duration,
        default="15s",
        help="then wait this long at most for requests in flight (default 15s)",
    )
    serve.add_argument(
        "--reload-interval",
        type=_duration,
        default="2s",
        help="how often the config file is checked for changes (default 2s)",
    )
    serve.add_argument(
        "--kubeconfig",
        help="kubeconfig for the API: bind, --configmap, Node and Pod watches (default: in-cluster service "
        "account when running in a pod)",
    )
    serve.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM); reloaded when it changes")
    serve.add_argument("--tls-key", help="the certificate's private key (PEM)")
    serve.add_argument("--tls-client-ca", help="require client certificates signed by this CA (mTLS)")
    serve.add_argument(
        "--watch-nodes",
        action="store_true",
        help="list/watch Nodes (address identities and pool labels with nodeCacheCapable: true; "
        "on by itself when herdGuard is enabled at start)",
    )
    serve.add_argument(
        "--requeue-stranded",
        action="store_true",
        help="when a node loadext refused becomes acceptable again for a pod its filter left without any "
        "node, annotate that Node (loadext.io/reopened) so kube-scheduler retries the pod at once instead "
        "of after up to 5 minutes; needs patch on nodes (docs/security.md)",
    )

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
    replay.add_argument("--since", type=_duration, default="24h", help="how far back (default 24h)")
    replay.add_argument("--step", type=_duration, default="5m", help="resolution (default 5m)")
    replay.add_argument("--output", choices=["table", "json"], default="table")
    replay.add_argument("--chart", help="also draw refused nodes over time into this PNG (needs matplotlib)")
    return parser


class NoData(Exception):
    """Prometheus answered, but with nothing loadext can decide on."""


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logs(args.log_level, args.log_format)
    try:
        if args.command == "check-config":
            return _check_config(args)
        if args.command == "explain":
            return _explain(args)
        if args.command == "replay":
            return _replay(args)
        return _serve(args)
    except ConfigError as exc:
        print(f"{exc.source}: invalid config", file=sys.stderr)
        for error in exc.errors:
            print(f"  {error}", file=sys.stderr)
        return EXIT_INVALID
    except QueryError as exc:
        print(f"error: prometheus query failed ({exc.kind}): {exc.detail}", file=sys.stderr)
        return EXIT_PROMETHEUS
    except NoData as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PROMETHEUS
    except (OSError, KeyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID


def _check_config(args: argparse.Namespace) -> int:
    config = load_config(args.file, check_queries=True)
    print(f"{args.file}: ok (hash {config.hash}, signals: {', '.join(s.name for s in config.signals)})")
    if not args.prometheus:
        return EXIT_OK
    source = PrometheusSource(replace(config.prometheus, url=args.prometheus.rstrip("/")))
    identity = config.node_identity
    worst = EXIT_OK
    try:
        for signal in config.signals:
            try:
                result = source.query(signal.name, config.query_for(signal), identity)
            except QueryError as exc:
                print(f"  {signal.name}: query failed ({exc.kind}): {exc.detail}")
                worst = EXIT_PROMETHEUS
                continue
            problem = _result_problem(result, identity.label)
            mapped = len(result.values)
            line = f"  {signal.name}: {mapped + result.unlabelled} series, {mapped} with label {identity.label!r}"
            if result.values:
                line += f", values {min(result.values.values()):.2f}..{max(result.values.values()):.2f}"
            print(line + (f": {problem}" if problem else ""))
            if problem and worst == EXIT_OK:
                worst = EXIT_INVALID
    finally:
        source.close()
    return worst


def _result_problem(result: QueryResult, label: str) -> str | None:
    """What makes a query's answer unusable for loadext, said so that it can be fixed."""
    if not result.values and not result.unlabelled:
        return "returned no series (a typo in a metric name or label, or nothing scraped yet?)"
    if not result.values:
        return f"no series has the label {label!r}: check nodeIdentity (or the preset)"
    if result.highest is not None and result.highest > 1.5:
        return (
            f"values up to {result.highest:g} look like percent (0-100); loadext needs a 0..1 ratio: "
            "divide the query by 100"
        )
    return None


def _serve(args: argparse.Namespace) -> int:
    from loadext.app import ServeOptions, serve
    from loadext.http.limits import Limits
    from loadext.sources.watches import ConfigMapRef

    configmap = ConfigMapRef(args.configmap[0], args.configmap[1], args.configmap_key) if args.configmap else None
    options = ServeOptions(
        config=args.config,
        configmap=configmap,
        kubeconfig=args.kubeconfig,
        watch_nodes=args.watch_nodes,
        requeue_stranded=args.requeue_stranded,
        reload_interval=args.reload_interval,
        listen=args.listen,
        path_prefix=args.path_prefix,
        metrics_listen=args.metrics_listen,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        tls_client_ca=args.tls_client_ca,
        limits=Limits(
            max_body_size=args.max_body_size,
            header_timeout=args.header_timeout,
            body_timeout=args.body_timeout,
            max_concurrent=args.max_concurrent_requests,
            max_inflight_bytes=args.max_inflight_bytes,
            body_memory=args.body_memory,
        ),
        shutdown_delay=args.shutdown_delay,
        shutdown_timeout=args.shutdown_timeout,
    )
    return serve(options)


def _explain(args: argparse.Namespace) -> int:
    if args.url:
        return _explain_remote(args)
    if args.pod:
        raise OSError("--pod needs --url: decisions live in the running loadext")
    from loadext.app import explain_once

    report = explain_once(load_config(args.config), args.kubeconfig, list(args.node))
    problems = [
        f"signal {s['name']}: query failed ({s['lastError']['kind']}): {s['lastError']['message']}"
        if s["failingFor"] is not None
        else f"signal {s['name']}: the query returned no series (check it with check-config --prometheus)"
        for s in report["signals"]
        if s["failingFor"] is not None or not s["series"]
    ]
    if problems:
        for problem in problems:
            print(f"error: {problem}", file=sys.stderr)
        return EXIT_PROMETHEUS
    if args.output == "json":
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(format_explain(report))
    return 0


def _replay(args: argparse.Namespace) -> int:
    import time

    from loadext.sources import replay

    end = time.time()
    start = end - args.since
    runs = {"candidate": load_config(args.config)}
    if args.current:
        runs = {"current": load_config(args.current), **runs}
    steps = {}
    for name, config in runs.items():
        history = replay.fetch(config, start, end, args.step)
        if not history:
            raise NoData(
                f"no samples for any signal of the {name} config between {time_text(start)} and "
                f"{time_text(end)} UTC (check the queries with check-config --prometheus)"
            )
        steps[name] = replay.evaluate(history, config)
    current = steps.get("current", steps["candidate"])
    summary = replay.compare(current, steps["candidate"])
    if args.output == "json":
        report = {"summary": summary, "steps": {n: [s.__dict__ for s in v] for n, v in steps.items()}}
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(format_replay(steps, summary))
    if args.chart:
        _replay_chart(steps, args.chart)
    return 0


def format_replay(steps: dict[str, list[Any]], summary: dict[str, Any]) -> str:
    names = list(steps)
    rows = [["TIME", *(f"{n.upper()} REFUSED" for n in names), *(f"{n.upper()} FAVOURITE" for n in names)]]
    for i, step in enumerate(steps[names[-1]]):
        at = [steps[n][i] if i < len(steps[n]) else None for n in names]
        refused = [", ".join(f"{k} {v}" for k, v in s.refused.items()) if s else "-" for s in at]
        rows.append([time_text(step.time), *refused, *((s.top or "-") if s else "-" for s in at)])
    lines = _table(rows)
    lines.append("")
    for name in names:
        totals = ", ".join(f"{k} {v}" for k, v in summary[name]["refused"].items())
        lines.append(f"{name}: node-steps refused by signal: {totals}")
    if len(names) > 1:
        lines.append(f"same favourite node in {summary['sameFavourite']:.0%} of {summary['steps']} steps")
    return "\n".join(lines)


def time_text(stamp: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(stamp))


def _replay_chart(steps: dict[str, list[Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4))
    for name, run in steps.items():
        ax.step([s.time - run[-1].time for s in run], [s.refused_nodes for s in run], where="post", label=name)
    ax.set_xlabel("seconds before now")
    ax.set_ylabel("nodes refused")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _explain_remote(args: argparse.Namespace) -> int:
    import urllib.error
    import urllib.parse
    import urllib.request

    query = "?" + urllib.parse.urlencode({"pod": args.pod}) if args.pod else ""
    try:
        with urllib.request.urlopen(args.url.rstrip("/") + "/explain" + query, timeout=10) as reply:
            report = orjson.loads(reply.read())
    except urllib.error.HTTPError as exc:
        print(f"error: {orjson.loads(exc.read()).get('error', exc)}", file=sys.stderr)
        return 1
    if args.output == "json":
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    elif args.pod:
        print(format_pod_decisions(report))
    else:
        print(format_explain(report))
    return 0


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def format_pod_decisions(report: dict[str, Any]) -> str:
    """A pod's last filter and prioritize, one row per candidate node."""
    lines = []
    for verb in ("filter", "prioritize"):
        decision = report.get(verb)
        if decision is None:
            continue
        signals = sorted({s for node in decision["nodes"] for s in node["signals"]})
        herd = "estimate" in decision
        header = ["NODE", *(s.upper() for s in signals), *(["IN FLIGHT"] if herd else []), "POOL", "VERDICT"]
        rows = [[*header, "SCORE", "REASON"]]
        for node in decision["nodes"]:
            cells = [node["node"]]
            for signal in signals:
                sample = node["signals"].get(signal)
                cells.append(
                    f"{sample['value'] * 100:.0f}%/{(sample['threshold'] or 0) * 100:g}% ({sample['age']:.0f}s)"
                    if sample
                    else "-"
                )
            if herd:
                cells.append(_in_flight_cell(node.get("inFlight")))
            cells += [node["pool"] or "-", node["verdict"], str(node["score"]), node["reason"] or "-"]
            rows.append(cells)
        lines.append(f"{verb} for {report['pod']} (config {decision['configHash']}); values are value/threshold (age):")
        if herd:
            estimate = decision["estimate"]
            source = estimate["source"]
            lines.append(
                f"the pod counts as {estimate['cpuCores']:g} cores (from {source['cpu']}), "
                f"{estimate['memoryBytes'] / 2**20:.0f} MiB (from {source['memory']}), "
                "added to each node with what is in flight there"
            )
        lines.extend(_table(rows))
        lines.append("")
    return "\n".join(lines).rstrip()


def _in_flight_cell(flight: dict[str, Any] | None) -> str:
    if not flight:
        return "-"
    return f"{flight['pods']} pod{'s' if flight['pods'] != 1 else ''}, {flight['cpuCores']:g} cores"


def format_explain(report: dict[str, Any]) -> str:
    """The table an SRE reads when asking "why not this node"."""
    signals = [s["name"] for s in report["signals"]]
    herd = report["herdGuard"]["enabled"]
    header = ["NODE", *(s.upper() for s in signals), *(["IN FLIGHT"] if herd else []), "VERDICT", "SCORE", "REASON"]
    rows = [header]
    for node in report["nodes"]:
        cells = [node["node"]]
        for signal in signals:
            sample = node["signals"].get(signal)
            cells.append(f"{sample['value'] * 100:.0f}% ({sample['age']:.0f}s)" if sample else "-")
        if herd:  # pods placed within the window, counted until the metrics can show them
            cells.append(_in_flight_cell(node.get("inFlight")))
        cells += [node["verdict"], str(node["score"]), node["reason"] or "-"]
        rows.append(cells)
    lines = _table(rows)
    thresholds = ", ".join(
        f"{s['name']} {'-' if s['threshold'] is None else format(s['threshold'] * 100, 'g') + '%'}"
        for s in report["signals"]
    )
    lines.append("")
    lines.append(
        f"thresholds: {thresholds}; strategy {report['strategy']}; missingData "
        f"{report['missingData']}; failurePolicy {report['failurePolicy']}; filterMode {report['filterMode']}; "
        f"config {report['configHash']}"
    )
    if report["degraded"]:
        lines.append("DEGRADED: no fresh data from Prometheus; the failure policy decides every node")
    for s in report["signals"]:
        error = s.get("lastError")
        if s.get("failingFor") is not None and error:
            success = "never" if s["lastSuccess"] is None else f"{report['time'] - s['lastSuccess']:.0f}s ago"
            lines.append(
                f"{s['name']}: queries failing for {s['failingFor']:.0f}s ({error['kind']}): {error['message']}; "
                f"last success {success}"
            )
            continue  # its series are missing because of that, whatever the mapping says
        if s["unmappedNodes"]:
            lines.append(
                f"{s['name']}: {len(s['unmappedNodes'])} nodes without a series: " + ", ".join(s["unmappedNodes"][:10])
            )
        if s["unmatchedSeries"]:
            lines.append(
                f"{s['name']}: {len(s['unmatchedSeries'])} series match no node: "
                + ", ".join(s["unmatchedSeries"][:10])
            )
    return "\n".join(lines)
