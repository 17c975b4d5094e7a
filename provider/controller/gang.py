"""A request's gang as the fleet sees it: its live instances (matched by the request's UID,
never by its name), the attempt that launched it and the node count that attempt planned,
both read from the request's status so that a restart compares what exists with what was
planned."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from provider.domain.cloud import CloudInstance, InstanceState
from provider.domain.fleet import Fleet, NodeState

# provisioningClassDetails entries allset keeps for itself (Kueue copies only the keys a
# ProvisioningRequestConfig names, so these never reach a pod).
ATTEMPT_DETAIL = "allset.dev/attempt"  # written before the attempt's first cloud call
PLANNED_DETAIL = "allset.dev/planned-nodes"  # written once the attempt committed


@dataclass(frozen=True, slots=True)
class Gang:
    attempt: str
    planned: int
    instances: tuple[CloudInstance, ...]  # live and not being deleted
    lost: tuple[str, ...]  # provider ids known to have been in it, now gone or going

    @property
    def short(self) -> int:
        return max(0, self.planned - len(self.instances))


def details(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("status") or {}).get("provisioningClassDetails") or {})


def owned(fleet: Fleet, uid: str) -> tuple[list[CloudInstance], list[CloudInstance]]:
    """(live, going): this request's committed instances in the fleet, split into those
    that still count and those CA or the cloud is taking away."""
    live, going = [], []
    for node in fleet.request_nodes(uid):  # not a walk of every node: once per request pass
        inst = node.instance
        if inst is None or inst.tags.request_uid != uid:
            continue
        if node.state is NodeState.DELETING or _leaving(inst):
            going.append(inst)
        else:
            live.append(inst)
    # A group the config dropped still holds a gang committed in it (a restart must not
    # launch a second one); reconcile.unknownGroups decides whether those nodes stay.
    for inst in fleet.unknown():
        if inst.tags.request_uid == uid:
            (going if _leaving(inst) else live).append(inst)
    return live, going


def _leaving(inst: CloudInstance) -> bool:
    return inst.state in (InstanceState.TERMINATING, InstanceState.TERMINATED)


def planned(obj: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """The recorded attempt and its planned node count (None where not recorded)."""
    found = details(obj)
    attempt = found.get(ATTEMPT_DETAIL) or None
    text = found.get(PLANNED_DETAIL) or ""
    return attempt, (int(text) if text.isdigit() else None)
