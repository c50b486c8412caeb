"""What changes the cluster: the rebalancer (evictions through the Eviction API, its Lease, its
node taints, and the cluster state it judges targets by) and the requeue of stranded pods. Each
decides through core (core/rebalance/, core/ingest.py) and acts through the Kubernetes API;
app.py builds them after the sources that feed core.
"""
