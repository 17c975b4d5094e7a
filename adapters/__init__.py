"""Cloud adapters behind one contract (adapters.base.CloudAdapter)."""
