"""ProvisioningRequests written directly (no Kueue), in either served version."""

from __future__ import annotations

from tests.e2e.kueue import pod_spec
from tests.e2e.look import PROVREQ
from tests.e2e.rest import Obj, Rest, is_true, wait_for

CLASS = "atomic-reserved.allset.dev"


def create(rest: Rest, name: str, version: str, pods: int = 1,
           namespace: str = "default") -> Obj:
    rest.create({"apiVersion": "v1", "kind": "PodTemplate",
                 "metadata": {"name": f"{name}-pods", "namespace": namespace},
                 "template": {"spec": pod_spec({"allset.dev/node-group": "direct"},
                                               {"cpu": "4"})}})
    return rest.create({
        "apiVersion": f"{PROVREQ}/{version}", "kind": "ProvisioningRequest",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"provisioningClassName": CLASS,
                 "podSets": [{"podTemplateRef": {"name": f"{name}-pods"}, "count": pods}]},
    })


def wait_provisioned(rest: Rest, name: str, version: str, explain: object = None,
                     namespace: str = "default") -> Obj:
    def done() -> Obj | None:
        found = rest.find(f"{PROVREQ}/{version}", "ProvisioningRequest", name, namespace)
        return found if is_true(found, "Provisioned") else None

    return wait_for(f"{name} ({version}) to be Provisioned", done, 90,
                    explain=explain if callable(explain) else None)


def delete(rest: Rest, name: str, namespace: str = "default") -> None:
    rest.delete(f"{PROVREQ}/v1", "ProvisioningRequest", name, namespace)
    rest.delete("v1", "PodTemplate", f"{name}-pods", namespace)
