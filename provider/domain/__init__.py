"""The words of design.md as types: node groups and their shapes, demand, plans and the
reasons a plan cannot be had, the fleet CA sees, a ProvisioningRequest read into demand,
devices, gangs, and the contract every cloud adapter keeps (cloud.py). Pure Python: no
cloud SDK, gRPC or Kubernetes client is imported here."""
