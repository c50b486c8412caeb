"""The herd guard: pods placed recently count on their node until the metrics can show them.

One module per rule, each with its test beside its name in tests/unit/:
usage.py (the Usage type and the estimate rule from a pod's spec), learned.py (estimates
learned from measured usage), inflight.py (the pods in flight per node and how they fade),
correction.py (a node re-judged with them), memo.py (the corrected verdicts kept per pod
size), stranded.py (pods left without a node) and guard.py (what the verbs ask: ActiveGuard,
or NO_GUARD when the guard is off).
"""
