"""The adversary: a seeded, randomized run of the real service (CA's gRPC calls, the
ProvisioningRequest controller on a Kubernetes API, the simulated cloud with faults and
eventual consistency, crashes and restarts) under cooperative scheduling, with the
invariants of design.md checked after every step and at quiescence.

Modules: sched (cooperative scheduling of real threads), cloud (faults, lag, records),
kube (the controller's gated API handle), endpoint (CA's gRPC side), world (the seed's
world and provider incarnations), actions (the adversary's moves), state/observe (what
the invariants read), invariants (the checks), run (one seed)."""
