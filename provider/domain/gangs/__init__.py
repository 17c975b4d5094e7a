"""Gangs that ask no one for capacity: pods of a Workload's PodGroup, or of a Volcano /
scheduler-plugins PodGroup, that the scheduler cannot place. allset turns each such gang
into one ProvisioningRequest of its own class, so it gets every node or none, instead of
CA scaling its pods up one by one. Pure: what a gang is and what to do about it."""
