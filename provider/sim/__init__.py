"""`allset simulate`: a GPU fleet in virtual time, allset against models of Cluster
Autoscaler's per-pod and best-effort-atomic scale-up and of Karpenter.

trace (schema, load, dump) -> generate (seeded traces) -> world (event loop, nodes, jobs,
the simulated cloud; fidelity: boot times, late failures, billing minimum) driven by a
strategy (allset, per_pod, ca_atomic, karpenter; baseline holds what the two CA models
share) -> accounting (GPU-hours, money) -> run (figures) -> report (text, JSON) and plot
(PNG)."""
