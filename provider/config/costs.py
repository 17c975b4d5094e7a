"""The config's `costs` section: whom the per-team spend metrics charge (docs/metrics.md)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from provider.config.base import Model
from provider.config.paths import phrased

_NAMESPACE = phrased(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
                     "a namespace name: lower-case letters, digits and '-', at most 63, "
                     "starting and ending with a letter or digit (e.g. ml-research)")


class Costs(Model):
    """Who is charged for what allset's nodes cost, in allset_team_spend_usd_per_hour."""

    reservation_owners: dict[Annotated[str, Field(min_length=1)],
                             Annotated[str, Field(pattern=_NAMESPACE)]] = Field(
        default_factory=dict, description="the namespace (team) an idle node in each "
        "reservation is charged to, by reservation id, e.g. {cr-0123abcd: ml-research}; "
        "the idle nodes of a reservation not listed are charged to nobody (namespace \"\")")
