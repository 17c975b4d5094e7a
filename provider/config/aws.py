"""Config schema of the AWS adapter: `cloud.aws` and `nodeGroups[].aws`."""

from __future__ import annotations

from pydantic import Field, model_validator

from provider.config.base import Model


class LaunchTemplate(Model):
    name: str | None = None
    id: str | None = None
    version: str = Field("$Default", description="a number, $Default or $Latest")

    @model_validator(mode="after")
    def _one_of(self) -> LaunchTemplate:
        if (self.name is None) == (self.id is None):
            raise ValueError("give exactly one of launchTemplate.name or launchTemplate.id")
        return self


class ReservationSelector(Model):
    """Which capacity reservations allset may use: by id, or by tags (all must match)."""

    ids: list[str] = Field(default_factory=list)
    tags: dict[str, str] = Field(default_factory=dict)


class AwsCloud(Model):
    region: str = Field(min_length=1)
    endpoint_url: str | None = Field(None, description="e.g. a local test endpoint")
    reservation_selector: ReservationSelector = Field(default_factory=ReservationSelector)


class AwsGroup(Model):
    launch_template: LaunchTemplate
    subnet_id: str | None = None
    placement_group: str | None = None
    efa_interfaces: int = Field(0, ge=0, description="EFA interfaces per instance")
    tags: dict[str, str] = Field(default_factory=dict)
