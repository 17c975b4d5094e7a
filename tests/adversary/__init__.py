"""The adversary: a seeded, randomized run of the real service (CA's gRPC calls, the
ProvisioningRequest controller's workers and the gang bridge on a Kubernetes API, requests
waiting for a capacity block's window, the simulated cloud with faults and
eventual consistency; one process that crashes and restarts, or two replicas elected on a
Lease, cut off from the API server or the cloud, their wall clocks stepped, killed,
restarted and rolled) under cooperative scheduling, with the invariants of design.md
checked after every step and at quiescence.

Modules: sched (cooperative scheduling of real threads), cloud (faults, lag, records, a
replica's link to the cloud), kube (a replica's link to the API server: partitions, held
requests, who wrote each attempt record), election (the real Election made
cooperative), endpoint (CA's gRPC side, routed as CA's Service is), world (the seed's
world, its replicas and their processes), passes (a controller pass: its workers at once),
actions (the adversary's moves), gangs (its moves on PodGroups and pods), state/observe
(what the invariants read), invariants (the checks), fixes (which of issue 31's fixes the
tree has), run (one seed)."""
