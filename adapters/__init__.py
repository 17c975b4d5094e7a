"""Cloud adapters behind one contract (provider.domain.cloud.CloudAdapter)."""
