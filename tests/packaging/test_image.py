"""The container image: scripts/image.sh builds it from Debian packages (no daemon, no
registry), and the image's own entrypoint, user and environment then run loadext, with a
read-only root filesystem, against the test Prometheus."""

from __future__ import annotations

import json
import os
import re
import subprocess
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from harness.exporter import Exporter
from harness.image import ROOT, UnpackedImage, build_image
from harness.inprocess import live_config, set_load
from harness.kubernetes import wait_until
from harness.loadext import ready
from harness.prometheus import PrometheusServer, free_port
from harness.wire import names_request

# Building the image from nothing may take up to image.sh's own 1500 s bound (harness/image.py).
pytestmark = [pytest.mark.packaging, pytest.mark.timeout(1800)]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UnpackedImage]:
    workdir = tmp_path_factory.mktemp("image")
    archive = workdir / "loadext-oci.tar"
    built = build_image(archive)
    assert built.returncode == 0, built.stderr[-3000:]
    summary = built.stderr.strip().splitlines()[-1]
    assert re.search(r"-> .*loadext-oci.tar \(\S+ archive, \d+ MB unpacked\) in \d+s", summary), summary
    print(summary)  # the size and build time, for the record (pytest -s or the CI log)
    yield UnpackedImage(archive, workdir)


def test_image_is_non_root_with_no_compilers_and_no_installer(image: UnpackedImage) -> None:
    assert image.reference == f"localhost/loadext:{VERSION}"
    process = image.process_spec
    assert process["user"] == {"uid": 65532, "gid": 65532}
    assert process["args"][:2] == ["loadext", "serve"]
    for tool in ("gcc", "cc", "g++", "make", "ld", "as"):
        assert not (image.rootfs / "usr/bin" / tool).exists(), f"{tool} in the image"
    site = image.rootfs / "opt/loadext/lib/python3.11/site-packages"
    assert (site / "loadext").is_dir()
    assert not list(site.glob("pip")) and not list(site.glob("setuptools")), "pip/setuptools left in the venv"


def test_entrypoint_reports_the_version(image: UnpackedImage) -> None:
    result = image.run(["loadext", "--version"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"loadext {VERSION}"


def test_the_image_can_sign_for_amazon_managed_prometheus(image: UnpackedImage) -> None:
    """prometheus.sigv4 needs the aws extra (botocore): the image ships it, importable from its
    read-only file system."""
    result = image.run(["/opt/loadext/bin/python", "-c", "import loadext.sources.sigv4, botocore.auth; print('ok')"])
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr


def test_root_filesystem_is_read_only_to_the_image_user(image: UnpackedImage) -> None:
    result = image.run(["/usr/bin/touch", "/opt/loadext/written"])
    assert result.returncode != 0 and "Read-only file system" in result.stderr


def test_serve_from_the_image_decides_from_prometheus(
    image: UnpackedImage, prometheus: PrometheusServer, exporter: Exporter, tmp_path: Path
) -> None:
    case = "image_serve"
    set_load(exporter, case, {"cool": 0.2, "hot": 0.95}, {"cool": 0.3, "hot": 0.3})
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    (config_dir / "config.yaml").write_text(yaml.safe_dump(live_config(prometheus.url, case)))
    os.chmod(config_dir, 0o755)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # The image's own command, plus a loopback listen address for this test.
    args = [*image.process_spec["args"], "--listen", f"127.0.0.1:{port}"]
    server = image.spawn("loadext-image", args, {config_dir: "/etc/loadext"})
    try:
        wait_until(lambda: ready(url), "loadext in the image", process=server)
        with urllib.request.urlopen(url + "/healthz", timeout=5) as reply:
            assert reply.status == 200

        def decided() -> bool:
            body = json.dumps(names_request("cool", "hot")).encode()
            request = urllib.request.Request(url + "/filter", body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=5) as reply:
                result = json.load(reply)
            return bool(result["NodeNames"] == ["cool"] and "hot" in result["FailedAndUnresolvableNodes"])

        wait_until(decided, "a filter decision from Prometheus data", timeout=30, process=server)
        inside = server.children()
        assert inside, "the image's loadext runs as unshare's child"
    finally:
        server.stop()
    assert [pid for pid in inside if Path(f"/proc/{pid}").exists()] == [], "the image's loadext outlived the test"


def test_image_script_names_a_missing_tool(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("dirname",):
        (bin_dir / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    result = subprocess.run(
        ["/bin/bash", str(ROOT / "scripts" / "image.sh"), str(tmp_path / "out.tar")],
        capture_output=True,
        text=True,
        env={"PATH": str(bin_dir)},
    )
    assert result.returncode == 1
    assert "mmdebstrap is missing; install the Debian package mmdebstrap" in result.stderr
