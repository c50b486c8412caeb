"""Run loadext's container image without a container engine: unpack the OCI archive with umoci
and start the image's own entrypoint, user and environment as a container runtime would, in
new mount and PID namespaces, chrooted into the image's root filesystem mounted read-only
(as the manifests' readOnlyRootFilesystem: true has it). The network is the host's, so a
server in the image listens on loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tarfile
from pathlib import Path
from typing import Any

from harness.kubernetes import Process

ROOT = Path(__file__).resolve().parent.parent


def build_image(out: Path) -> subprocess.CompletedProcess[str]:
    """scripts/image.sh, as the README gives it; its summary line is on stderr."""
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "image.sh"), str(out)], capture_output=True, text=True, timeout=1500
    )


class UnpackedImage:
    def __init__(self, archive: Path, workdir: Path) -> None:
        umoci = shutil.which("umoci")
        assert umoci, "umoci is required (Debian package umoci; scripts/setup.sh dev installs it)"
        layout = workdir / "oci"
        with tarfile.open(archive) as tar:
            tar.extractall(layout, filter="tar")
        index = json.loads((layout / "index.json").read_text())
        self.reference = index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"]
        self.bundle = workdir / "bundle"
        subprocess.run([umoci, "unpack", "--image", f"{layout}:{self.reference}", str(self.bundle)], check=True)
        self.rootfs = self.bundle / "rootfs"
        self.spec: dict[str, Any] = json.loads((self.bundle / "config.json").read_text())
        self.workdir = workdir

    @property
    def process_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = self.spec["process"]
        return spec

    def argv(self, args: list[str] | None = None, binds: dict[Path, str] | None = None) -> list[str]:
        """The command line that runs `args` (default: the image's entrypoint and command) as the
        image's user, with `binds` (host path -> path in the image) mounted read-only."""
        process = self.process_spec
        user = f"{process['user']['uid']}:{process['user']['gid']}"
        root = shlex.quote(str(self.rootfs))
        mounts = [f"mount --bind {root} {root}", f"mount -t proc proc {root}/proc", f"mount --rbind /dev {root}/dev"]
        for host, inside in (binds or {}).items():
            target = self.rootfs / inside.lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            mounts.append(f"mount --bind -o ro {shlex.quote(str(host))} {shlex.quote(str(target))}")
        mounts.append(f"mount -o remount,bind,ro {root}")
        command = [
            "chroot",
            f"--userspec={user}",
            str(self.rootfs),
            "/usr/bin/env",
            "-i",
            *process["env"],
            *(args if args is not None else process["args"]),
        ]
        script = " && ".join([*mounts, "exec " + shlex.join(command)])
        return ["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c", script]

    def run(self, args: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.argv(args), capture_output=True, text=True, timeout=60, **kwargs)

    def spawn(self, name: str, args: list[str], binds: dict[Path, str]) -> NamespacedProcess:
        return NamespacedProcess(name, self.argv(args, binds), self.workdir)


class NamespacedProcess(Process):
    """A process run by `unshare --fork`: unshare ignores SIGTERM while it waits for its child,
    and its --kill-child death signal is cleared when chroot --userspec changes the user, so
    stopping unshare alone left the image's loadext running after the test. Signal the child
    (PID 1 of the new namespace, which takes its whole namespace with it) first."""

    def children(self) -> list[int]:
        try:
            return [
                int(pid) for pid in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            ]
        except OSError:  # unshare is gone
            return []

    def stop(self) -> None:
        for pid in self.children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        super().stop()
