"""What a group's launches are, as EC2 matches them against a capacity reservation: "a
Capacity Reservation ... matches new instances ... that have matching attributes (instance
type, platform, Availability Zone, and tenancy)" (EC2 user guide, Work with Capacity
Reservations). The platform is the one of the launch template's image
(Image.PlatformDetails: "The platform details associated with the billing code of the
AMI", named as a reservation's InstancePlatform is), the tenancy the template's
Placement.Tenancy (default when it sets none). The config says either where the template
cannot (an image resolved through SSM at launch, a VPC whose tenancy is dedicated), and it
wins where it is set. Read once, at start: a template version that changes later is seen
after a restart, and EC2's refusal of a launch marks the reservation unavailable meanwhile."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from adapters.aws.client import Client
from adapters.aws.settings import GroupLaunch

log = logging.getLogger(__name__)

PLATFORM, TENANCY = "platform", "tenancy"
Launch = tuple[tuple[str, str], ...]  # NodeGroup.launch
_AWS_ERRORS = (ClientError, BotoCoreError)
_IMAGES_PER_CALL = 200


def template_params(group: GroupLaunch) -> dict[str, Any]:
    """How DescribeLaunchTemplateVersions names the group's template and version."""
    named: dict[str, Any] = {"Versions": [group.template_version]}
    if group.template_id is not None:
        named["LaunchTemplateId"] = group.template_id
    else:
        named["LaunchTemplateName"] = group.template_name
    return named


def read_launches(client: Client, groups: Sequence[GroupLaunch]) -> dict[str, Launch]:
    """Each group's (platform, tenancy) as far as they are known: the config's, else its
    template's. A group whose template or image cannot be read lacks what it could not
    read, said once in the log; an attribute not known is not checked."""
    data: dict[tuple[str, ...], Mapping[str, Any] | None] = {}
    for g in groups:
        if g.platform is None or g.tenancy is None:
            key = _template_key(g)
            if key not in data:
                data[key] = _template_data(client, g)
    images = [str(d.get("ImageId", "")) for d in data.values() if d is not None]
    platforms = _image_platforms(client, [i for i in images if i.startswith("ami-")])
    out: dict[str, Launch] = {}
    for g in groups:
        found = data.get(_template_key(g)) or {}
        platform = g.platform or platforms.get(str(found.get("ImageId", "")))
        tenancy = g.tenancy or (str(found.get("Placement", {}).get("Tenancy") or "default")
                                if found else None)
        if platform is None:
            log.warning("group %s: the platform of its launch template's image cannot be "
                        "read; set nodeGroups[].aws.platform so reservations of another "
                        "platform are not planned for it", g.group)
        out[g.group] = tuple((k, v) for k, v in ((PLATFORM, platform), (TENANCY, tenancy))
                             if v is not None)
    return out


def _template_key(g: GroupLaunch) -> tuple[str, ...]:
    return (g.template_id or "", g.template_name or "", g.template_version)


def _template_data(client: Client, g: GroupLaunch) -> Mapping[str, Any] | None:
    try:
        found = client.describe_launch_template_versions(**template_params(g))
    except _AWS_ERRORS as err:
        log.warning("group %s: launch template not read (%s)", g.group, err)
        return None
    versions = found.get("LaunchTemplateVersions", [])
    return versions[0].get("LaunchTemplateData", {}) if versions else None


def _image_platforms(client: Client, image_ids: Iterable[str]) -> dict[str, str]:
    """Image id -> its PlatformDetails. A filter, not ImageIds=[...], which fails whole on
    one image the account cannot see."""
    wanted = sorted(set(image_ids))
    out: dict[str, str] = {}
    for start in range(0, len(wanted), _IMAGES_PER_CALL):
        chunk = wanted[start:start + _IMAGES_PER_CALL]
        try:
            found = client.describe_images(Filters=[{"Name": "image-id", "Values": chunk}])
        except _AWS_ERRORS as err:
            log.warning("images %s not read (%s)", ", ".join(chunk[:5]), err)
            continue
        for image in found.get("Images", []):
            details = image.get("PlatformDetails")
            if details:
                out[image["ImageId"]] = str(details)
    return out
