"""Config schema of the AWS adapter: `cloud.aws` and `nodeGroups[].aws`.

Field checks live on the models; checks that need the whole file (a group's zone against the
region, placement groups against fabrics) are in `provider.config.aws_checks`, which the
loader runs when ``cloud.provider`` is ``aws``."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from provider.config.base import Model
from provider.config.paths import phrased
from provider.config.units import duration_seconds

_TEMPLATE_ID = phrased(r"^lt-[0-9a-f]+$",
                       "a launch template id: lt- and hex digits (e.g. lt-0123456789abcdef0)")
_REGION = phrased(r"^[a-z]{2}(-[a-z]+)+-\d+$", "an AWS region name (e.g. us-east-1)")
_SUBNET_ID = phrased(r"^subnet-[0-9a-f]+$",
                     "a subnet id: subnet- and hex digits (e.g. subnet-0123456789abcdef0)")

# Tag keys allset writes itself (adapters/aws/tags.py) and keys AWS reserves.
RESERVED_TAG_PREFIXES = ("allset.dev/", "aws:")
_VERSION = re.compile(r"^(\$Default|\$Latest|[1-9][0-9]*)$")
RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{8,17}$")
ZONE = re.compile(r"^(?P<region>[a-z]{2}(-[a-z]+)+-\d+)[a-z]$")
# EC2 begins terminating a Capacity Block's instances 30 minutes before it ends ("Thirty
# minutes before the reservation expires, we begin to terminate any instances that are
# still running in the Capacity Block", EC2 user guide, Work with Capacity Blocks), an
# UltraServer Capacity Block's 60 minutes before (EC2 user guide, Capacity Blocks for ML,
# UltraServer Capacity Blocks), so no cut-off of either may be shorter.
BLOCK_TERMINATION_SECONDS = 30 * 60
ULTRASERVER_BLOCK_TERMINATION_SECONDS = 60 * 60


def _at_least(floor: float, what: str) -> AfterValidator:
    def check(value: str | int | float) -> str | int | float:
        if duration_seconds(value) < floor:
            minutes = floor / 60
            raise ValueError(f"{value!r} is less than {minutes:.0f}m: EC2 starts terminating "
                             f"{what} instances {minutes:.0f} minutes before its end")
        return value

    return AfterValidator(check)


Cutoff = Annotated[str | int | float,
                   _at_least(BLOCK_TERMINATION_SECONDS, "a Capacity Block's")]
UltraServerCutoff = Annotated[str | int | float, _at_least(
    ULTRASERVER_BLOCK_TERMINATION_SECONDS, "an UltraServer Capacity Block's")]


class LaunchTemplate(Model):
    """The EC2 launch template a group's instances start from (give its name or its id)."""

    name: str | None = Field(None, description="launch template name")
    id: str | None = Field(None, pattern=_TEMPLATE_ID, description="launch template id")
    version: str = Field("$Default", description="a number, $Default or $Latest")

    @model_validator(mode="after")
    def _one_of(self) -> LaunchTemplate:
        if (self.name is None) == (self.id is None):
            raise ValueError("give exactly one of launchTemplate.name or launchTemplate.id")
        if not _VERSION.match(self.version):
            raise ValueError(
                f"launchTemplate.version {self.version!r} must be a number, $Default or $Latest"
            )
        return self


def _tags(value: dict[str, str]) -> dict[str, str]:
    for key, val in value.items():
        if key.lower().startswith(RESERVED_TAG_PREFIXES):
            raise ValueError(f"tag key {key!r}: the prefixes allset.dev/ and aws: are reserved")
        if not 1 <= len(key) <= 128 or len(val) > 256:
            raise ValueError(f"tag {key!r}: keys are 1-128 characters, values at most 256")
    return value


class ReservationSelector(Model):
    """Which capacity reservations allset may use: those with one of ``ids``, and those
    carrying every tag in ``tags``. Reservations a group lists under ``reservations`` are
    always selected. Nothing selected means on-demand (and spot) only."""

    ids: list[str] = Field(default_factory=list, description="reservation ids (cr-...)")
    tags: dict[str, str] = Field(default_factory=dict, description="tags a reservation must "
                                 "all carry")

    @field_validator("ids")
    @classmethod
    def _ids(cls, value: list[str]) -> list[str]:
        for rid in value:
            if not RESERVATION_ID.match(rid):
                raise ValueError(f"{rid!r} is not a capacity reservation id (cr-...)")
        return value


class AwsCloud(Model):
    """The AWS account allset launches in (credentials from the standard chain)."""

    region: str = Field(min_length=1, pattern=_REGION,
                        description="every group's zone is in it")
    endpoint_url: str | None = Field(None, description="e.g. a VPC endpoint or a test server")
    reservation_selector: ReservationSelector = Field(
        default_factory=ReservationSelector, description="which capacity reservations "
        "allset may use")
    capacity_block_cutoff: Cutoff = Field(
        "40m", description="stop launching into a Capacity Block this long before it ends "
        "(at least 30m: EC2 terminates its instances from 30 minutes before the end)")
    ultra_server_block_cutoff: UltraServerCutoff = Field(
        "70m", description="the same for an UltraServer Capacity Block (at least 60m: EC2 "
        "terminates its instances from 60 minutes before the end)")


# CapacityReservation.InstancePlatform and Tenancy (botocore's EC2 model, enums
# CapacityReservationInstancePlatform and CapacityReservationTenancy): EC2 launches into a
# reservation only instances of its platform and tenancy.
PLATFORMS = (
    "Linux/UNIX", "Red Hat Enterprise Linux", "SUSE Linux", "Windows", "Windows with SQL Server",
    "Windows with SQL Server Enterprise", "Windows with SQL Server Standard",
    "Windows with SQL Server Web", "Linux with SQL Server Standard",
    "Linux with SQL Server Web", "Linux with SQL Server Enterprise",
    "RHEL with SQL Server Standard", "RHEL with SQL Server Enterprise",
    "RHEL with SQL Server Web", "RHEL with HA", "RHEL with HA and SQL Server Standard",
    "RHEL with HA and SQL Server Enterprise", "Ubuntu Pro",
)


class AwsGroup(Model):
    """How a group's instances are launched on EC2."""

    launch_template: LaunchTemplate = Field(description="what the instances start from; "
                                            "leave market and reservation settings out")
    subnet_id: str | None = Field(None, pattern=_SUBNET_ID,
                                  description="override the template's subnet")
    security_group_ids: list[str] = Field(
        default_factory=list, description="override the template's; required with EFA"
    )
    placement_group: str | None = Field(
        None, min_length=1, max_length=255,
        description="cluster placement group (default: the group's fabric)",
    )
    efa_interfaces: int = Field(0, ge=0, le=64, description="EFA interfaces per instance")
    efa_secondary_type: Literal["efa-only", "efa"] = Field(
        "efa-only", description="interface type of the EFA interfaces after the first: "
        "efa-only takes no subnet address (needs an EFA driver that knows it); efa takes "
        "one each")
    tags: dict[str, str] = Field(default_factory=dict, description="extra tags on every "
                                 "instance and volume (not allset.dev/ or aws:)")
    platform: str | None = Field(
        None, description="the platform its instances run, as a capacity reservation names "
        "it (e.g. Linux/UNIX, Red Hat Enterprise Linux); default: read from the launch "
        "template's image. Set it where that cannot be read (an image resolved through SSM)")
    tenancy: Literal["default", "dedicated"] | None = Field(
        None, description="default or dedicated; default: the launch template's "
        "Placement.Tenancy, else default. Set it for a VPC whose instance tenancy is "
        "dedicated")

    @field_validator("tags")
    @classmethod
    def _user_tags(cls, value: dict[str, str]) -> dict[str, str]:
        return _tags(value)

    @field_validator("platform")
    @classmethod
    def _platform(cls, value: str | None) -> str | None:
        if value is not None and value not in PLATFORMS:
            raise ValueError(f"{value!r} is not a platform a capacity reservation names: "
                             + ", ".join(PLATFORMS))
        return value

    @model_validator(mode="after")
    def _efa(self) -> AwsGroup:
        if self.efa_interfaces and (self.subnet_id is None or not self.security_group_ids):
            raise ValueError(
                "efaInterfaces needs subnetId and securityGroupIds: the EFA interfaces allset "
                "writes replace the launch template's network settings"
            )
        return self
