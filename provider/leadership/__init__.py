"""Who may act on the cluster's instances: one process at a time.

In a cluster, replicas elect a leader on a coordination.k8s.io Lease (elector.py, with
the Kubernetes edge in kube.py); outside one, an exclusive lock on the state directory
stops a second process (statelock.py). Every launch, commit and termination is fenced:
it happens only while this process holds the right with margin to spare."""
