"""loadext: a load-aware scheduling extender for kube-scheduler, driven by Prometheus."""

__version__ = "0.1.0"
