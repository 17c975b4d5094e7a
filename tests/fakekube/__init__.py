"""A fake Kubernetes API server for the real `kubernetes` client: see fake.FakeKube."""

from tests.fakekube import objects
from tests.fakekube.errors import ApiError
from tests.fakekube.fake import FakeKube

__all__ = ["ApiError", "FakeKube", "objects"]
