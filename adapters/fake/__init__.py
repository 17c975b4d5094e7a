"""The simulated cloud: allset's embedded default for local runs, demos, tests and benches."""

from adapters.fake.cloud import FakeCloud, FakeSettings, Stockout

__all__ = ["FakeCloud", "FakeSettings", "Stockout"]
