"""`allset simulate`: a GPU fleet in virtual time, allset against models of Cluster
Autoscaler's per-pod and best-effort-atomic scale-up, of reserved groups pinned at their
reservation's size, and of Karpenter, each set up as a careful operator would.

trace (schema, load, dump) -> generate (seeded traces) -> world (event loop, nodes, jobs,
the simulated cloud; fidelity: boot times, late failures, billing minimum) driven by a
strategy (allset, per_pod, ca_atomic, pinned, karpenter; baseline holds what the CA models
share: node groups, expander, backoff, scale-down cooldown; scaleup their ordinary per-pod
scale-up) -> accounting (GPU-hours, money) -> run (figures) -> report (text, JSON) and
plot (PNG); spread sums up many runs (medians and ranges over seeds, ratios to allset, the
docs/simulation.md's markdown) for bench/simulate."""
