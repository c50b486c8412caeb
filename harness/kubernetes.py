"""A real Kubernetes control plane on loopback: etcd, kube-apiserver and kube-schedulers,
built from their Go modules by tests/e2e/build-k8s.sh. No kubelets: Node objects are created
through the API with the status a kubelet would report.
"""

from __future__ import annotations

import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config

from harness.certs import make_ca, make_cert, make_signing_key
from harness.prometheus import free_port

ROOT = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = ROOT / "tests" / "e2e" / "build-k8s.sh"
ADMIN_TOKEN = "loadext-e2e-admin-token"  # loopback-only throwaway cluster


def ready_node_status(name: str, cpu: str, memory: str, ip: str = "", message: str = "e2e") -> dict[str, Any]:
    """A Node's status as its kubelet would report it: Ready, with capacity = allocatable."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}
    addresses = [{"type": "Hostname", "address": name}]
    if ip:
        addresses.insert(0, {"type": "InternalIP", "address": ip})
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    return {"capacity": resources, "allocatable": resources, "addresses": addresses, "conditions": [ready]}


def build_components() -> Path:
    """Build (or find in the cache) the Kubernetes binaries; returns their directory."""
    result = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"building Kubernetes components failed:\n{result.stderr[-4000:]}")
    return Path(result.stdout.strip().splitlines()[-1])


class Process:
    """A child process whose output goes to a log file; stopped by PID with SIGTERM, then KILL."""

    def __init__(self, name: str, argv: list[str], workdir: Path) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, chars: int = 3000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def wait_until(check: Callable[[], bool], what: str, timeout: float = 60.0, process: Process | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and not process.alive():
            raise RuntimeError(f"{process.name} exited:\n{process.log_tail()}")
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.1)
    tail = process.log_tail() if process is not None else ""
    raise TimeoutError(f"timed out waiting for {what}\n{tail}")


class ControlPlane:
    def __init__(self, workdir: Path, bin_dir: Path, disabled_admission: tuple[str, ...] = ("ServiceAccount",)) -> None:
        self.disabled_admission = disabled_admission
        self.scheduler_ports: dict[str, int] = {}
        self.workdir = workdir
        self.bin = bin_dir
        self.processes: list[Process] = []
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.ca = workdir / "ca.crt"

    # --- setup ---------------------------------------------------------------------------

    def _certificates(self) -> None:
        w = self.workdir
        ca = make_ca(w, "ca")
        make_cert(w, ca, "apiserver", "IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc")
        make_signing_key(w, "sa")
        (w / "tokens.csv").write_text(f'{ADMIN_TOKEN},admin,admin-uid,"system:masters"\n')

    def start(self) -> None:
        self._certificates()
        w = self.workdir
        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        etcd = self.spawn(
            "etcd",
            [
                str(self.bin / "etcd"),
                "--name=e2e",
                f"--data-dir={w / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=e2e=http://127.0.0.1:{peer_port}",
                "--log-level=warn",
            ],
        )
        wait_until(
            lambda: b"true" in urllib.request.urlopen(etcd_url + "/health", timeout=1).read(),
            "etcd",
            process=etcd,
        )
        self._apiserver_argv = [
            str(self.bin / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.port}",
            f"--tls-cert-file={w / 'apiserver.crt'}",
            f"--tls-private-key-file={w / 'apiserver.key'}",
            f"--client-ca-file={self.ca}",
            f"--token-auth-file={w / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={w / 'sa.pub'}",
            f"--service-account-signing-key-file={w / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            # No controller-manager runs, so nobody creates the default ServiceAccounts.
            f"--disable-admission-plugins={','.join(self.disabled_admission)}",
            f"--cert-dir={w / 'apiserver-certs'}",
            "--profiling=false",
            "--v=1",
        ]
        self._apiserver = self._start_apiserver()
        self.admin_kubeconfig = self.kubeconfig("admin", ADMIN_TOKEN)

    def _start_apiserver(self) -> Process:
        apiserver = self.spawn("kube-apiserver", self._apiserver_argv)
        context = ssl.create_default_context(cafile=str(self.ca))

        def ready() -> bool:
            request = urllib.request.Request(self.url + "/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            with urllib.request.urlopen(request, timeout=2, context=context) as reply:
                return bool(reply.status == 200)

        wait_until(ready, "kube-apiserver /readyz", timeout=120, process=apiserver)
        return apiserver

    def stop_apiserver(self) -> None:
        """An API server outage: etcd and everything else keep running."""
        self._apiserver.stop()
        self.processes.remove(self._apiserver)

    def start_apiserver(self) -> None:
        """Back, on the same port with the same data."""
        self._apiserver = self._start_apiserver()

    def spawn(self, name: str, argv: list[str]) -> Process:
        process = Process(name, argv, self.workdir)
        self.processes.append(process)
        return process

    # --- identities ----------------------------------------------------------------------

    def kubeconfig(self, user: str, token: str) -> Path:
        path = self.workdir / f"{user}.kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "current-context": "e2e",
                    "clusters": [
                        {
                            "name": "e2e",
                            "cluster": {"server": self.url, "certificate-authority": str(self.ca)},
                        }
                    ],
                    "users": [{"name": user, "user": {"token": token}}],
                    "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": user}}],
                }
            )
        )
        return path

    def api(self, kubeconfig: Path | None = None) -> Any:
        return client.ApiClient(configuration=self._configuration(kubeconfig or self.admin_kubeconfig))

    @staticmethod
    def _configuration(kubeconfig: Path) -> Any:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        return configuration

    def service_account_kubeconfig(self, namespace: str, name: str) -> Path:
        """A kubeconfig holding a TokenRequest token: the identity a pod with that SA would have."""
        core = client.CoreV1Api(self.api())
        request = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=["https://kubernetes.default.svc"], expiration_seconds=24 * 3600)
        )
        token = core.create_namespaced_service_account_token(name, namespace, request).status.token
        return self.kubeconfig(f"{namespace}-{name}", token)

    def kubectl(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={self.admin_kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )

    # --- schedulers ----------------------------------------------------------------------

    def start_scheduler(self, name: str, scheduler_config: dict[str, Any], kubeconfig: Path, *flags: str) -> Process:
        """Run kube-scheduler with a KubeSchedulerConfiguration, pointed at this apiserver;
        `flags` go to its command line; its secure port is kept in `scheduler_ports`."""
        scheduler_config = dict(scheduler_config)
        scheduler_config["clientConnection"] = {
            **scheduler_config.get("clientConnection", {}),
            "kubeconfig": str(kubeconfig),
        }
        scheduler_config["leaderElection"] = {"leaderElect": False}
        path = self.workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(scheduler_config))
        port = free_port()
        process = self.spawn(
            name,
            [
                str(self.bin / "kube-scheduler"),
                f"--config={path}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                "--v=2",
                *flags,
            ],
        )
        context = ssl._create_unverified_context()  # its self-signed serving cert; loopback only

        def healthy() -> bool:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=1, context=context) as reply:
                return bool(reply.status == 200)

        wait_until(healthy, f"{name} /healthz", process=process)
        self.scheduler_ports[name] = port
        return process

    def start_controller_manager(self, *controllers: str, flags: Sequence[str] = ()) -> Process:
        """kube-controller-manager running only `controllers` (replicaset, disruption, ...):
        what recreates evicted pods and computes PodDisruptionBudget status; `flags` go after."""
        port = free_port()
        process = self.spawn(
            "kube-controller-manager",
            [
                str(self.bin / "kube-controller-manager"),
                f"--kubeconfig={self.admin_kubeconfig}",
                f"--authentication-kubeconfig={self.admin_kubeconfig}",
                f"--authorization-kubeconfig={self.admin_kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--controllers={','.join(controllers)}",
                "--leader-elect=false",
                "--v=1",
                *flags,
            ],
        )
        context = ssl._create_unverified_context()  # its self-signed serving cert; loopback only

        def healthy() -> bool:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=1, context=context) as reply:
                return bool(reply.status == 200)

        wait_until(healthy, "kube-controller-manager /healthz", process=process)
        return process

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
