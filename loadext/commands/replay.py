"""`loadext replay`: a candidate config over Prometheus history, beside the config in force."""

from __future__ import annotations

import sys
import time
from typing import Any

import orjson

from loadext.commands import EXIT_OK, NoData
from loadext.commands.tables import format_replay, time_text
from loadext.config import Config, load_config
from loadext.core import replay
from loadext.core.snapshot import Sample
from loadext.sources.metrics import MetricsSource


def run(candidate: str, current: str | None, since: float, step: float, output: str, chart: str | None) -> int:
    from loadext.app import metrics_source  # the composition root names the backend

    end = time.time()
    start = end - since
    runs = {"candidate": load_config(candidate)}
    if current:
        runs = {"current": load_config(current), **runs}
    steps = {}
    for name, config in runs.items():
        source = metrics_source(config.prometheus)
        try:
            history = fetch(source, config, start, end, step)
        finally:
            source.close()
        if not history:
            raise NoData(
                f"no samples for any signal of the {name} config between {time_text(start)} and "
                f"{time_text(end)} UTC (check the queries with check-config --prometheus)"
            )
        steps[name] = replay.evaluate(history, config)
    summary = replay.compare(steps.get("current", steps["candidate"]), steps["candidate"])
    if output == "json":
        report = {"summary": summary, "steps": {n: [s.__dict__ for s in v] for n, v in steps.items()}}
        sys.stdout.buffer.write(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        print(format_replay(steps, summary))
    if chart:
        draw_chart(steps, chart)
    return EXIT_OK


def fetch(source: MetricsSource, config: Config, start: float, end: float, step: float) -> replay.Series:
    """One range query per signal; blocking. Samples are read by the live path's rules."""
    history: replay.Series = {}
    for signal in config.signals:
        for stamp, result in source.query_range(
            config.query_for(signal), start, end, step, config.node_identity
        ).items():
            for key, value in result.values.items():
                sample = Sample(value, stamp, result.means.get(key), result.stddevs.get(key))
                history.setdefault(stamp, {}).setdefault(key, {})[signal.name] = sample
    return history


def draw_chart(steps: dict[str, list[Any]], path: str) -> None:
    """Refused nodes over time, one line per config, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 4))
    for name, run_steps in steps.items():
        times = [s.time - run_steps[-1].time for s in run_steps]
        ax.step(times, [s.refused_nodes for s in run_steps], where="post", label=name)
    ax.set_xlabel("seconds before now")
    ax.set_ylabel("nodes refused")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
