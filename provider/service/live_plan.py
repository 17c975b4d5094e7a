"""Plans against a running server's live view (issue 15): the ledger with every claim in
flight, recent stockouts and failures, and what each group holds against maxSize, which a
plan made from a fresh listing (`allset plan --config`) cannot see.

* A ProvisioningRequest (with its PodTemplates): the gang allset would launch for it now.
* A Pod: CA's path as a dry run. CA's expander picks the group; allset says which groups
  can host the pod (and why the others cannot), and what IncreaseSize(group, 1) would
  launch in each, from which capacity source."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from provider.app import Provider
from provider.config.schema import queue_problem
from provider.domain.demand import CLASS_NAME
from provider.domain.devices.from_api import DocumentObjects, is_dra_document
from provider.domain.model import ScaleUpMode
from provider.domain.provreq import BadRequest, demand_from, split_documents
from provider.planner.group import plan_group_delta
from provider.planner.render import plan_json, plan_text, timing_json, timing_text


def live_plan(provider: Provider, documents: Sequence[Any], source: str,
              queue: str | None = None, deadline: float | None = None) -> dict[str, Any]:
    """Raises BadRequest for documents that are neither a request nor one Pod, or a
    ``queue`` (the request's Kueue LocalQueue, namespace/name) that is not one.
    ``deadline`` (monotonic): the planning process stops there (Planner.timing)."""
    if queue is not None and (problem := queue_problem(queue)):
        raise BadRequest(source, [("queue", problem)])
    pods = [d for d in documents if isinstance(d, Mapping) and d.get("kind") == "Pod"]
    if pods:
        others = [d for d in documents if d and not (isinstance(d, Mapping) and (
            d.get("kind") == "Pod" or is_dra_document(d)))]
        if len(pods) != 1 or others:
            raise BadRequest(source, [("", "a dry run takes exactly one Pod (and the "
                                           "DRA objects its claims name)")])
        dra = [d for d in documents if isinstance(d, Mapping) and is_dra_document(d)]
        return _dry_run(provider, pods[0], DocumentObjects(dra))
    request, templates, objects = split_documents(documents, source)
    demand, _ = demand_from(request, templates, objects)
    demand = provider.config.guarded(demand, queue=queue)
    view = provider.ledger.view()
    sizes = provider.fleet.occupied()
    # The idle nodes the request would book instead of launching (the plan says which).
    idle = [n for n in provider.idle() if n.provider_id not in view.booked]
    result, wait = provider.planner.timing(demand, view, sizes, idle=idle, deadline=deadline)
    text = plan_text(demand.name, result)
    if demand.expected_runtime_seconds is not None:
        text += "\n" + timing_text(demand, wait)
    return {"kind": "ProvisioningRequest", "name": demand.name, "plan": plan_json(result),
            "timing": timing_json(demand, wait), "text": text}


def _dry_run(provider: Provider, pod: Mapping[str, Any], objects: DocumentObjects
             ) -> dict[str, Any]:
    meta = pod.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    name = str(meta.get("name") or "pod")
    # The pod as a one-pod request: the same parsing and matching a request gets.
    request = {"apiVersion": "autoscaling.x-k8s.io/v1", "kind": "ProvisioningRequest",
               "metadata": {"name": name, "namespace": meta.get("namespace") or "default"},
               "spec": {"provisioningClassName": CLASS_NAME,
                        "podSets": [{"podTemplateRef": {"name": "pod"}, "count": 1}]}}
    template = {"kind": "PodTemplate", "metadata": {"name": "pod"},
                "template": {"metadata": {"labels": meta.get("labels") or {}},
                             "spec": pod.get("spec") or {}}}
    demand, _ = demand_from(request, {"pod": template}, objects)
    pod_set = demand.pod_sets[0]
    view = provider.ledger.view()
    fits = {c.group for c in provider.matcher.match(demand, pod_set)}
    groups = []
    for gid, exclusions in provider.matcher.explain(demand, pod_set).items():
        group = provider.groups[gid]
        entry: dict[str, Any] = {"group": gid, "fits": gid in fits}
        if gid in fits:
            result = plan_group_delta(view, provider.matcher, group, 1,
                                      partial=group.scale_up is ScaleUpMode.PARTIAL,
                                      name=f"IncreaseSize({gid}, 1)")
            entry["increaseSize1"] = plan_json(result)
        else:
            entry["why"] = [e.message for e in exclusions]
        groups.append(entry)
    lines = [f"pod {name}: CA's expander picks among the groups that fit"]
    for g in groups:
        if not g["fits"]:
            lines.append(f"  {g['group']}: does not fit ({'; '.join(g['why'])})")
            continue
        found = g["increaseSize1"]
        parts = ", ".join(f"{p['count']} x {p['nodeGroup']} ({p['reservation'] or p['source']})"
                          for p in found["parts"]) if found["feasible"] else \
            "no plan: " + "; ".join(r["message"] for r in found["reasons"])
        lines.append(f"  {g['group']}: fits; IncreaseSize(1) would launch {parts}")
    return {"kind": "Pod", "name": name, "groups": groups, "text": "\n".join(lines)}
