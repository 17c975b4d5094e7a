"""The ProvisioningRequest controller: serves the atomic-reserved.allset.dev class."""
