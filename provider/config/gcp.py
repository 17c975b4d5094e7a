"""Config schema of the GCP adapter: `cloud.gcp` and `nodeGroups[].gcp`.

Checks that need the whole config (a group's zone in the region, a template for every
group) are made by the adapter when it starts (`adapters/gcp/settings.py`), each naming
the field to fix."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from provider.config.base import Model
from provider.config.units import duration_seconds


def _duration(value: str | int | float) -> str | int | float:
    duration_seconds(value)
    return value


Duration = Annotated[str | int | float, AfterValidator(_duration)]


class Accelerator(Model):
    """GPUs attached to each instance."""

    type: str = Field(min_length=1, description="e.g. nvidia-tesla-t4")
    count: int = Field(gt=0, description="GPUs of that type per instance")


class GcpReservationSelector(Model):
    """Which reservations of the region allset may use (GCE reservations carry no labels,
    so they are chosen by name). Names and prefixes both empty: every reservation in the
    region. ``projects`` adds reservations other projects share with this one."""

    names: list[str] = Field(default_factory=list, description="exact reservation names")
    name_prefixes: list[str] = Field(default_factory=list, description="e.g. team-a-")
    projects: list[str] = Field(
        default_factory=list, description="owner projects whose reservations shared with "
        "this project are used too (allset needs compute.reservations.list there); "
        "names and prefixes apply to them as well")


class GcpCloud(Model):
    """The project allset launches in (Application Default Credentials)."""

    project: str = Field(min_length=1, description="project id")
    region: str = Field(min_length=1, description="e.g. us-central1; every group's zone is in it")
    api_endpoint: str | None = Field(
        None, description="default: the public Compute API; an http:// endpoint is a local "
        "test server and is called without credentials"
    )
    reservation_selector: GcpReservationSelector = Field(
        default_factory=GcpReservationSelector, description="which specific reservations "
        "allset may use")
    request_timeout: Duration = Field("60s", description="timeout of one API call")
    operation_timeout: Duration = Field(
        "20m", description="how long a launch waits for its bulkInsert operation; after that "
        "its outcome is unknown and is settled by listing"
    )


class GcpGroup(Model):
    """How a group's instances are launched on Compute Engine."""

    machine_type: str | None = Field(
        None, description="must equal instanceType when given (reservations match on it)"
    )
    accelerators: list[Accelerator] = Field(
        default_factory=list, description="attached GPUs (N1 style); A2/A3/G2 bring their own"
    )
    instance_template: str | None = Field(
        None, description="name or URL of the instance template (image, disks, service "
        "account, bootstrap metadata); required on GCP. allset sets the VM's scheduling "
        "itself: spot VMs and reservation-bound ones (DENSE reservations) get "
        "instanceTerminationAction DELETE, since GCE's default, STOP, would leave them "
        "stopped at a preemption or at the reservation's end, billing for their disks"
    )
    placement_policy: str | None = Field(
        None, description="compact placement resource policy of the region (name or URL); "
        "default for a group with a fabric: the policy named like the fabric. Added to the "
        "template's resource policies"
    )
    network: str | None = Field(None, description="network of the first NIC (default: the "
                                "template's); the template's other NICs are kept")
    subnetwork: str | None = Field(None, description="subnetwork of the first NIC (default: "
                                   "the template's); the template's other NICs are kept")
    labels: dict[str, str] = Field(
        default_factory=dict, description="extra GCE labels on every instance"
    )
