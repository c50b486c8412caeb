"""Rebalancing after placement, on the signals and thresholds the filter uses (docs/rebalancing.md).

- streaks.py: which nodes run hot, with hysteresis (hot after `hotFor` refreshes at or above
  `evictAt` or `overFor` over the threshold, cool after `coolFor` within it);
- selection.py and candidates.py: which pods of a hot node may move, and the fewest that bring
  it back within its thresholds;
- fit/: whether kube-scheduler's default filters would accept a pod's replacement on a node;
- targets.py: the first node that passes loadext's filter with the pod added and the fit;
- plan.py: the moves of one cycle, within the rate limits, each with its target.

Pure, like the rest of core: actors/placement.py reads the cluster, actors/rebalancer.py
evicts.
"""
