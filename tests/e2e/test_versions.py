"""Both versions the ProvisioningRequest CRD serves: a request written as v1 and one written
as v1beta1 are both provisioned, and each reads the same through the other version."""

from __future__ import annotations

import pytest

from tests.e2e import direct
from tests.e2e.conftest import World
from tests.e2e.look import PROVREQ, gang_of
from tests.e2e.rest import is_true


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
def test_request_in_each_served_version(world: World, version: str) -> None:
    rest = world.cluster.rest
    name = f"direct-{version}"
    created = direct.create(rest, name, version, pods=1)
    assert created["apiVersion"] == f"{PROVREQ}/{version}"
    try:
        got = direct.wait_provisioned(rest, name, version, world.logs)
        other = "v1beta1" if version == "v1" else "v1"
        seen = rest.get(f"{PROVREQ}/{other}", "ProvisioningRequest", name, "default")
        assert is_true(seen, "Provisioned")
        assert seen["status"]["provisioningClassDetails"] == \
            got["status"]["provisioningClassDetails"]
        (inst,) = gang_of(world.kubelet.instances(), got)  # launched, or an idle one booked
        assert inst.tags.committed
    finally:
        direct.delete(rest, name)
