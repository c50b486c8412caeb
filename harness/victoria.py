"""VictoriaMetrics single-node and vmauth in front of it, started on loopback (Debian's
victoria-metrics package has both): a Prometheus-compatible backend that scrapes like
Prometheus, and an auth proxy as platform teams put in front of one."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

from harness.prometheus import free_port
from harness.served import Served

VICTORIA_METRICS = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"
VMAUTH = shutil.which("vmauth") or "/usr/bin/vmauth"  # Debian's, 1.79: users by bearer token or password
# A vmauth that routes on request headers (src_headers, as a tenant-requiring gateway does), built
# from its Go module: Debian's predates it. scripts/test.sh builds it once, cached.
TENANT_VMAUTH = ("vmauth", "./app/vmauth", "v1.150.0", "github.com/VictoriaMetrics/VictoriaMetrics")
ROOT = Path(__file__).resolve().parent.parent


def built_vmauth() -> str:
    """The path of the header-routing vmauth (built on first use if scripts/test.sh did not)."""
    name, package, version, module = TENANT_VMAUTH
    script = ROOT / "scripts" / "build-go-tool.sh"
    built = subprocess.run(
        ["bash", str(script), "--module", module, name, package, version], capture_output=True, text=True, check=False
    )
    if built.returncode != 0:
        raise RuntimeError(f"building vmauth {version} failed (it needs Go): {built.stderr.strip()}")
    return built.stdout.strip()


class VictoriaMetrics(Served):
    """Single-node VictoriaMetrics scraping `scrape_config` (Prometheus' format) every second."""

    def __init__(self, workdir: str, scrape_config: str) -> None:
        config = os.path.join(workdir, "scrape.yml")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write(scrape_config)
        port = free_port()
        argv = [
            VICTORIA_METRICS,
            f"-httpListenAddr=127.0.0.1:{port}",
            f"-storageDataPath={os.path.join(workdir, 'vm-data')}",
            f"-promscrape.config={config}",
            "-promscrape.config.strictParse=false",  # the harness's scrape config carries evaluation_interval
            "-search.latencyOffset=0s",  # answer with the newest samples, not those 30 s old
            "-loggerLevel=WARN",
        ]
        super().__init__(workdir, "victoria-metrics", argv, port)

    def wait_scraped(self, timeout: float = 20.0) -> None:
        """Until the first scrape is searchable. VictoriaMetrics 1.79 remembers a search that
        found no series for a while, so a test must not ask for its own series before they
        exist: this asks for the scrape job's `up` only (a query no test makes)."""
        deadline = time.monotonic() + timeout
        while self._stored_rows() == 0:  # its own counters first: they poison no search
            if time.monotonic() > deadline:
                raise TimeoutError("VictoriaMetrics stored nothing: " + self.read_log())
            time.sleep(0.1)
        query = urllib.parse.urlencode({"query": 'up{job="exporter"} == 1'})
        while True:
            with urllib.request.urlopen(f"{self.url}/api/v1/query?{query}", timeout=5) as reply:
                if json.load(reply)["data"]["result"]:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError("VictoriaMetrics scraped nothing: " + self.read_log())
            time.sleep(0.2)

    def _stored_rows(self) -> float:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        found = re.search(r"^vm_rows_added_to_storage_total (\S+)$", text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0


class VmAuth(Served):
    """vmauth with `auth_config` (its users: bearer_token or username/password, url_prefix; or
    with `binary` from built_vmauth, routes by src_headers)."""

    def __init__(self, workdir: str, auth_config: str, binary: str = VMAUTH) -> None:
        config = os.path.join(workdir, "vmauth.yml")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write(auth_config)
        port = free_port()
        argv = [binary, f"-httpListenAddr=127.0.0.1:{port}", f"-auth.config={config}", "-loggerLevel=WARN"]
        super().__init__(workdir, "vmauth", argv, port)
