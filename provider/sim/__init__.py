"""`allset simulate`: a GPU fleet in virtual time, allset against models of Cluster
Autoscaler's per-pod and best-effort-atomic scale-up.

trace (schema, load, dump) -> generate (seeded traces) -> world (event loop, nodes, jobs,
the simulated cloud) driven by a strategy (allset, per_pod, ca_atomic; baseline holds
what the two CA models share) -> accounting (GPU-hours, money) -> run (figures) ->
report (text, JSON) and plot (PNG)."""
