"""Would the real scheduler place a pod on a node: the rebalancer moves a pod only to a node
kube-scheduler's default filters would accept for its replacement (docs/rebalancing.md).

- model.py: the fields of pods and nodes those filters read;
- labels.py: selectors, node selector terms, tolerations;
- resources.py: a pod's requests as NodeResourcesFit counts them;
- world.py: the cluster one cycle judges on;
- judge.py: the filters, in the scheduler's order, first reason first;
- verifiable.py: what the fit cannot judge (the pod stays).

tests/e2e/test_fit_differential.py holds the verdicts against the real kube-scheduler's.
"""

from loadext.core.rebalance.fit.judge import Judge
from loadext.core.rebalance.fit.verifiable import unverifiable
from loadext.core.rebalance.fit.world import World

__all__ = ["Judge", "World", "unverifiable"]
