"""Make kube-scheduler retry the pods loadext left without a node, as soon as one would fit.

core/herd/stranded.py says why: a parked pod that loadext refused is requeued by any cluster event,
and nothing loadext decides on (load, the herd window, its config) is one. This loop makes one:
it annotates the node that reopened with the time (`loadext.io/reopened`), an update the
scheduler sees as a Node annotation change. It needs `patch` on nodes (docs/security.md), so
`loadext serve --requeue-stranded` turns it on; the shipped manifests do.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from loadext.core.ingest import Ingest
from loadext.sources import kube
from loadext.telemetry.herd import HerdMetrics

log = logging.getLogger(__name__)

ANNOTATION = "loadext.io/reopened"
CHECK_EVERY = 1.0  # seconds between looks at the stranded pods; a look is lookups in memory
_HINT = "loadext's ClusterRole needs patch on nodes (see docs/security.md), or run without --requeue-stranded"


async def requeue_stranded(ingest: Ingest, api: Any, metrics: HerdMetrics) -> None:
    """Until cancelled: when a node reopens for a stranded pod, annotate it (one API write
    serves every stranded pod: the scheduler requeues them all on the event)."""
    failing = ""
    while True:
        await asyncio.sleep(CHECK_EVERY)
        node = ingest.reopened_node()
        if node is None:
            continue
        now = ingest.clock()
        waiting = ingest.stranded_nudged()
        stamp = datetime.fromtimestamp(now, UTC).isoformat(timespec="milliseconds")
        error = await asyncio.to_thread(kube.annotate_node, api, node, ANNOTATION, stamp)
        metrics.nudged(ok=not error)
        if error:
            if error != failing:  # one line per change, not one per second
                log.warning("%s: stranded pods wait for the scheduler's own retry (up to 5m); %s", error, _HINT)
            failing = error
            continue
        failing = ""
        log.info(
            "node %s would take a pod loadext left without a node: annotated %s so kube-scheduler "
            "retries the %d stranded pods now",
            node,
            ANNOTATION,
            waiting,
        )
