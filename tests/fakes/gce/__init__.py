"""A fake Compute Engine REST API that the real google-cloud-compute client talks to over
plain HTTP on 127.0.0.1: the GCP adapter's tests and bench run against it."""

from tests.fakes.gce.model import Compute, Fault, MachineType, OpError
from tests.fakes.gce.server import serve

__all__ = ["Compute", "Fault", "MachineType", "OpError", "serve"]
