"""The decisions, pure: a snapshot of node load and a config in, verdicts and scores out.

Nothing here does I/O or imports a web, Kubernetes or Prometheus library (`lint-imports`
checks it), so every decision can be unit-tested with plain values. sources/ feed it, http/
serves it, app.py wires the three together.
"""
