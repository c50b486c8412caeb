"""Draws every dashboard panel from real Prometheus data, without a Grafana.

    python3 docs/render_dashboards.py [--seconds 90] [--out docs/img]

Starts the live stack (harness/stack.py: loadext under scheduler traffic, a real Prometheus
scraping it and eight synthetic nodes), moves some load around while it runs, then runs each
panel's queries exactly as Grafana would (variables substituted) and draws them with matplotlib
into one PNG per dashboard.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.stack import LiveStack  # noqa: E402

VARIABLES = {
    "$__rate_interval": "10s",
    "$__interval": "2s",
    "$job": "loadext",
    "$node": ".*",
    "$signal": ".*",
    "$timeout": "2",
}


def substitute(expr: str, range_seconds: int) -> str:
    values = {**VARIABLES, "$__range": f"{range_seconds}s"}
    for name, value in sorted(values.items(), key=lambda item: -len(item[0])):
        expr = expr.replace(name, value)
    return expr


def api(stack: LiveStack, path: str, **params: Any) -> list[dict[str, Any]]:
    url = f"{stack.prometheus.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=20) as reply:
        result: list[dict[str, Any]] = json.load(reply)["data"]["result"]
        return result


def legend(template: str, metric: dict[str, str]) -> str:
    text = template
    for key, value in metric.items():
        text = text.replace("{{" + key + "}}", value)
    return text or ",".join(f"{k}={v}" for k, v in metric.items() if k != "__name__")


def draw(ax: Any, stack: LiveStack, panel: dict[str, Any], start: float, end: float) -> None:
    ax.set_title(panel["title"], fontsize=9, loc="left")
    unit = panel["fieldConfig"]["defaults"].get("unit", "")
    kind = panel["type"]
    range_seconds = int(end - start)
    if kind in ("timeseries", "state-timeline"):
        for target in panel["targets"]:
            for series in api(
                stack, "query_range", query=substitute(target["expr"], range_seconds), start=start, end=end, step=2
            ):
                xs = [float(t) - end for t, _ in series["values"]]
                ys = [float(v) for _, v in series["values"]]
                style = "--" if "threshold" in target["legendFormat"] or "timeout" in target["legendFormat"] else "-"
                ax.plot(xs, ys, style, linewidth=1, label=legend(target["legendFormat"], series["metric"])[:28])
        ax.set_xlabel("seconds ago", fontsize=7)
        if panel["fieldConfig"]["defaults"].get("custom", {}).get("scaleDistribution", {}).get("type") == "log":
            ax.set_yscale("log")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=5, ncol=2, loc="upper left")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
    elif kind == "stat":
        results = api(stack, "query", query=substitute(panel["targets"][0]["expr"], range_seconds), time=end)
        text = "no data"
        if results:
            value = results[0]["value"][1]
            mapped = {
                str(k): v["text"]
                for m in panel["fieldConfig"]["defaults"].get("mappings", [])
                for k, v in m.get("options", {}).items()
            }
            if panel.get("options", {}).get("textMode") == "name":
                text = legend(panel["targets"][0]["legendFormat"], results[0]["metric"])
            else:
                text = mapped.get(value, f"{float(value):.1f}{' s' if unit == 's' else ''}")
        ax.text(0.5, 0.45, text, ha="center", va="center", fontsize=16, transform=ax.transAxes)
        ax.axis("off")
    elif kind == "bargauge":
        target = panel["targets"][0]
        results = api(stack, "query", query=substitute(target["expr"], range_seconds), time=end)
        labels = [legend(target["legendFormat"], r["metric"]) for r in results]
        values = [float(r["value"][1]) for r in results]
        if labels and all(label.isdigit() for label in labels):
            order = sorted(range(len(labels)), key=lambda i: int(labels[i]))
            ax.bar([labels[i] for i in order], [values[i] for i in order])
        else:
            ax.barh(labels[::-1], values[::-1])
            ax.tick_params(axis="y", labelsize=6)
    elif kind == "table":
        # Targets: A value per node and signal, B passes, C score, D data age per node and signal.
        ratio, passes, score, age = (
            api(stack, "query", query=substitute(t["expr"], range_seconds), time=end) for t in panel["targets"]
        )
        signals = sorted({r["metric"]["signal"] for r in ratio})
        rows: dict[str, dict[str, str]] = {}
        for r in ratio:
            rows.setdefault(r["metric"]["node"], {})[r["metric"]["signal"]] = f"{float(r['value'][1]):.0%}"
        for column, results in (("passes", passes), ("score", score)):
            for r in results:
                rows.setdefault(r["metric"]["node"], {})[column] = f"{float(r['value'][1]):.0f}"
        for r in age:
            row = rows.setdefault(r["metric"]["node"], {})
            row["age"] = f"{max(float(r['value'][1]), float(row.get('age', 0))):.0f}"
        header = [*signals, "passes", "score", "age"]
        cells = [[node, *(rows[node].get(h, "") for h in header)] for node in sorted(rows)]
        ax.axis("off")
        if cells:
            table = ax.table(
                cellText=cells, colLabels=["node", *signals, "passes", "score", "data age (s)"], loc="center"
            )
            table.auto_set_font_size(False)
            table.set_fontsize(7)
    ax.tick_params(labelsize=6)


def render(stack: LiveStack, out: Path, start: float, end: float) -> list[Path]:
    """One PNG per dashboard, each panel where its gridPos puts it on Grafana's 24-column grid."""
    written = []
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        dashboard = json.loads(path.read_text())
        panels = dashboard["panels"]
        rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
        fig = plt.figure(figsize=(14, 0.42 * rows + 0.6))
        top = 1 - 0.6 / (0.42 * rows + 0.6)
        for panel in panels:
            grid = panel["gridPos"]
            unit = top / rows  # one grid row, leaving room for the title above and the axis label below
            left, width = grid["x"] / 24 + 0.035, grid["w"] / 24 - 0.05
            bottom, height = top - (grid["y"] + grid["h"]) * unit + 0.9 * unit, grid["h"] * unit - 1.6 * unit
            draw(fig.add_axes((left, bottom, width, height)), stack, panel, start, end)
        fig.suptitle(
            f"{dashboard['title']} (rendered from a live Prometheus by docs/render_dashboards.py)", fontsize=11
        )
        target = out / path.with_suffix(".png").name
        fig.savefig(target, dpi=80)
        plt.close(fig)
        written.append(target)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=90, help="how long the stack runs before drawing")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    stack = LiveStack(Path(tempfile.mkdtemp(prefix="loadext-render-")))
    try:
        stack.start()
        start = time.time()
        stack.wait_scraped(args.seconds / 3)
        stack.set_load("worker-5", 0.97, 0.5)  # a batch job lands on worker-5
        stack.break_config_once()
        time.sleep(args.seconds / 3)
        stack.set_load("worker-2", 0.10, 0.2)  # worker-2 drains
        time.sleep(args.seconds / 3)
        for path in render(stack, args.out, start, time.time()):
            print(path)
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
