"""Rebalancing after placement, on the signals and thresholds the filter uses (docs/rebalancing.md).

- streaks.py: which nodes run hot, with hysteresis (hot after `hotFor` refreshes at or above
  `evictAt`, cool after `coolFor` within the threshold);
- selection.py: which pods of a hot node may move, and the fewest that bring it back within
  its thresholds;
- plan.py: the moves of one cycle, within the rate limits, each with a target node that passes
  loadext's own filter with the pod added.

Pure, like the rest of core: sources/rebalancer.py reads the pods and evicts them.
"""
