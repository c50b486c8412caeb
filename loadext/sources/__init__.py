"""What feeds core: Prometheus (refreshed in the background), the Kubernetes API (Node, Pod and
ConfigMap watches, Bindings) and config reload. Each source publishes into core through one
method and never reaches into its state; none knows how decisions are served.
"""
