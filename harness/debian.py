"""A stock Debian 12 machine for the quick start: a root filesystem that mmdebstrap makes from
Debian packages (minbase plus Debian's own python3, nothing else), entered with chroot in a new
mount namespace, with this checkout copied in as a fresh clone would have it.

Only what this machine's network needs is carried over: its resolver configuration and, where
HTTPS goes through an intercepting proxy, the CA bundle pip is told to trust (PIP_CERT).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tarfile
from pathlib import Path

from harness.image import ROOT

HOST_CA = os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt")


class DebianRoot:
    def __init__(self, workdir: Path) -> None:
        tarball = subprocess.run(
            ["bash", str(ROOT / "packaging" / "rootfs.sh"), "minbase", "python3"],
            capture_output=True,
            text=True,
            check=True,
            timeout=900,
        ).stdout.strip()
        self.root = workdir / "debian"
        with tarfile.open(tarball) as tar:
            tar.extractall(self.root, filter="fully_trusted")
        shutil.copy("/etc/resolv.conf", self.root / "etc" / "resolv.conf")
        self.env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
        if os.path.isfile(HOST_CA):
            # Apart from /etc/ssl, which installing ca-certificates in there rewrites.
            shutil.copy(HOST_CA, self.root / "root" / "host-ca.crt")
            self.env["PIP_CERT"] = "/root/host-ca.crt"

    def copy_checkout(self, target: str = "/src") -> str:
        """The files a fresh clone has: tracked ones and untracked ones git does not ignore."""
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.split(b"\0")
        destination = self.root / target.lstrip("/")
        for name in filter(None, (n.decode() for n in listed)):
            source = ROOT / name
            if source.is_file() or source.is_symlink():
                (destination / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, destination / name, follow_symlinks=False)
        return target

    def run(self, command: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
        """`command` in a login-less root shell inside the chroot."""
        root = shlex.quote(str(self.root))
        env = " ".join(shlex.quote(f"{k}={v}") for k, v in self.env.items())
        script = (
            f"mount -t proc proc {root}/proc && mount --rbind /dev {root}/dev && "
            f"exec chroot {root} /usr/bin/env -i {env} /bin/bash -c {shlex.quote(command)}"
        )
        return subprocess.run(
            ["unshare", "--mount", "--pid", "--fork", "--kill-child", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
