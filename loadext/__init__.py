"""loadext: a load-aware scheduling extender for kube-scheduler, driven by Prometheus."""

from importlib.metadata import PackageNotFoundError, version

try:  # the one place the version is written is pyproject.toml
    __version__ = version("loadext")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
