"""Everything that acts on the cloud: the executor runs a plan as one all-or-nothing
attempt and rolls it back whole; CA's scale-ups and a ProvisioningRequest's gang are its two
callers; reconcile settles what a crash left; the journal records each attempt before its
first cloud call; attempt metrics and log lines say what happened."""
