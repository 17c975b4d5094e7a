"""Whether a gang's scheduler would admit it into its queue now (pure): asked before allset
asks capacity for a gang, so that nodes are not bought for a gang its queue holds back.
Each rule is its scheduler's own, cited beside it; Kueue needs none (it admits a workload
first and creates its ProvisioningRequest after).

- Volcano (volcano.sh/volcano v1.10.0, pkg/scheduler/plugins/proportion/proportion.go,
  JobEnqueueable and allocatable; Queue of volcano.sh/apis v1.14.0 scheduling/v1beta1): a
  queue whose ``spec.capability`` is set admits a gang while, in every resource the gang
  asks for that the capability names, ``status.allocated`` plus the gang's need stays within
  it. The need is the larger of the PodGroup's ``spec.minResources`` (what enqueueing
  checks) and its stuck pods' requests (what allocation checks, pod by pod). A queue not
  ``Open`` (``Closed``, ``Closing``) admits nothing; one that does not exist admits nothing
  ("if queue does not exist, the PodGroup will not be scheduled": PodGroupSpec.Queue).
  With hierarchical queues (``spec.parent``) every ancestor is held to the same rule.
- KAI Scheduler (github.com/NVIDIA/KAI-scheduler v0.12.0,
  pkg/scheduler/plugins/proportion/capacity_policy/): for the queue and each of its
  ``spec.parentQueue`` ancestors, per resource (gpu, cpu, memory): over limit when
  ``limit`` is not -1 (unlimited) and ``limit < allocated + need`` (max_allowed_check.go;
  a limit of 0 or unset allows nothing, as KAI's docs/queues say); for a non-preemptible
  gang also over quota when ``quota`` is not -1 and ``quota < allocatedNonPreemptible +
  need`` (quota_check.go). Units as KAI keeps them (pkg/apis/scheduling/v2/resources.go
  and proportion.go): gpu in GPUs, cpu in millicpus, memory in MB of 10^6 bytes; the
  queue's ``status.allocated`` and ``allocatedNonPreemptible`` are Kubernetes quantities
  summed from its pods (pkg/queuecontroller). A gang is non-preemptible when its
  ``spec.preemptibility`` says so, or says nothing and its priority is 100 or more
  (pkg/common/podgroup/preemptible.go). A PodGroup whose queue does not exist is ignored by
  KAI (cluster_info.go): it admits nothing.
- YuniKorn (yunikorn-core v1.8.0): a queue's ``resources.max`` in the partition's queue
  tree of ``queues.yaml`` (pkg/common/configs/config.go, QueueConfig) caps what the
  queue and everything under it hold; an ask fits while it fits the headroom of the queue
  and every ancestor (objects/application.go, tryAllocate with the queue's headroom).
  Resource names are YuniKorn's: ``vcore`` for cpu (in millicores: ParseVCore), ``memory``
  and others as Kubernetes names them, ``pods`` one per pod (the k8shim counts it); a
  resource the max does not name is unlimited. The usage is what YuniKorn's pods on nodes
  request, counted here from the pods."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provider.domain.devices.quantity import quantity_milli
from provider.domain.model import MILLI, Resources
from provider.domain.pods import container_requests, pod_requests

REASON = "QueueWouldNotAdmit"
GPU = "nvidia.com/gpu"


@dataclass(frozen=True, slots=True)
class QueueRefusal:
    """Why a gang's queue would not admit it now: the queue, the resource it is short of
    (or what else stops it: ``state``, ``existence``), and a sentence with the figures."""

    scheduler: str
    queue: str
    resource: str
    message: str

    def text(self) -> str:
        return f"{self.scheduler} queue {self.queue}: {self.message}"


# --- quantities -----------------------------------------------------------------------------


def bounds(raw: Any) -> dict[str, int]:
    """A ResourceList (``{"cpu": "8", "memory": "64Gi"}``) in milli-units, zeros kept (a
    bound of 0 admits none of that resource, one not named is unbounded); what is not a
    quantity is left out (a scheduler would not count it either)."""
    out: dict[str, int] = {}
    for key, value in (raw or {}).items() if isinstance(raw, Mapping) else ():
        try:
            out[str(key)] = quantity_milli(value)
        except ValueError:
            continue
    return out


def amounts(raw: Any) -> Resources:
    """A ResourceList of amounts held or asked for, in milli-units."""
    return Resources.of(bounds(raw))


def requests_of(pod: Mapping[str, Any]) -> Resources:
    """What a pod asks of a node, as the scheduler counts it, plus one pod slot (``pods``)."""
    spec = pod.get("spec") or {}

    def of(container: Mapping[str, Any]) -> Resources:
        res = container.get("resources") or {}
        try:
            return container_requests(dict(amounts(res.get("requests")).items()),
                                      dict(amounts(res.get("limits")).items()))
        except ValueError:
            return Resources()

    containers = [of(c) for c in spec.get("containers") or [] if isinstance(c, Mapping)]
    inits = [(of(c), c.get("restartPolicy") == "Always")
             for c in spec.get("initContainers") or [] if isinstance(c, Mapping)]
    pod_level = spec.get("resources") or {}
    return pod_requests(containers, inits, amounts(spec.get("overhead")),
                        amounts(pod_level.get("requests")
                                if isinstance(pod_level, Mapping) else None))


def total(pods: Iterable[Mapping[str, Any]]) -> Resources:
    out = Resources()
    for pod in pods:
        out = out + requests_of(pod)
    return out


def show(resource: str, milli: float) -> str:
    """An amount as a person reads it: ``16``, ``1500m``, ``64Gi``."""
    if resource in ("memory", "ephemeral-storage") and milli >= 10**9 * MILLI:
        for unit, size in (("Gi", 2**30), ("G", 10**9)):
            if milli % (size * MILLI) == 0:
                return f"{int(milli // (size * MILLI))}{unit}"
        return f"{milli / (2**30 * MILLI):.3g}Gi"
    if milli % MILLI == 0:
        return f"{int(milli // MILLI)}"
    return f"{int(milli)}m"


# --- Volcano -------------------------------------------------------------------------------


def volcano(queues: Mapping[str, Mapping[str, Any] | None], leaf: str, need: Resources,
            min_resources: Resources | None = None) -> QueueRefusal | None:
    """``queues``: the Queue objects read, by name (None: it does not exist)."""
    if min_resources is not None:
        need = need.maximum(min_resources)
    for name in chain(queues, leaf, "parent"):
        queue = queues.get(name)
        if queue is None and name != leaf:
            break  # an ancestor not made (a cluster without hierarchical queues)
        if queue is None:
            return QueueRefusal("Volcano", name, "existence",
                                "it does not exist, and Volcano schedules no pod group of "
                                "a queue that does not exist")
        state = str((queue.get("status") or {}).get("state") or "Open")
        if state != "Open":
            return QueueRefusal("Volcano", name, "state",
                                f"it is {state}, and a queue that is not Open admits no "
                                "pod group")
        spec = queue.get("spec") or {}
        if not spec.get("capability"):
            continue
        short = _over(need, amounts((queue.get("status") or {}).get("allocated")),
                      bounds(spec.get("capability")))
        if short is not None:
            resource, used, cap = short
            return QueueRefusal("Volcano", name, resource, _figures(
                resource, need.get(resource), used, cap, "capability"))
    return None


def _over(need: Resources, used: Resources, cap: Mapping[str, int]
          ) -> tuple[str, int, int] | None:
    """The first resource the bound names and ``need`` asks for that would go over."""
    for resource, amount in need.items():
        if resource in cap and used.get(resource) + amount > cap[resource]:
            return resource, used.get(resource), cap[resource]
    return None


def _figures(resource: str, need: float, used: float, cap: float, what: str) -> str:
    return (f"{resource}: the gang needs {show(resource, need)} and "
            f"{show(resource, used)} of its {what} {show(resource, cap)} is in use")


def chain(queues: Mapping[str, Mapping[str, Any] | None], leaf: str, parent: str
           ) -> list[str]:
    """The queue and its ancestors (leaf first), as far as ``queues`` holds them (the
    reader reads the next one named until none is); a chain that comes back on itself
    stops."""
    chain, name = [], leaf
    while name and name not in chain:
        chain.append(name)
        queue = queues.get(name)
        if queue is None:
            break
        name = str((queue.get("spec") or {}).get(parent) or "")
    return chain


# --- KAI ----------------------------------------------------------------------------------

# KAI's units: GPUs, millicpus, MB (proportion.go's mebibytes = 1000 * 1000).
_KAI = (("gpu", GPU, MILLI), ("cpu", "cpu", 1), ("memory", "memory", MILLI * 10**6))
UNLIMITED = -1.0


def kai(queues: Mapping[str, Mapping[str, Any] | None], leaf: str, need: Resources,
        preemptible: bool) -> QueueRefusal | None:
    for name in chain(queues, leaf, "parentQueue"):
        queue = queues.get(name)
        if queue is None and name != leaf:
            break  # an orphan's missing parent (KAI marks the queue Orphan)
        if queue is None:
            return QueueRefusal("KAI", name, "existence",
                                "it does not exist, and KAI ignores a pod group whose queue "
                                "does not exist")
        status = queue.get("status") or {}
        spec = ((queue.get("spec") or {}).get("resources") or {})
        checks = [("limit", amounts(status.get("allocated")))]
        if not preemptible:
            checks.append(("quota", amounts(status.get("allocatedNonPreemptible"))))
        for what, used in checks:
            refusal = _kai_over(name, spec, what, used, need)
            if refusal is not None:
                return refusal
    return None


def _kai_over(name: str, spec: Mapping[str, Any], what: str, used: Resources,
              need: Resources) -> QueueRefusal | None:
    for key, resource, unit in _KAI:
        asked = need.get(resource) / unit
        if not asked:
            continue
        raw = (spec.get(key) or {}).get(what, 0) if isinstance(spec.get(key), Mapping) else 0
        bound = float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) \
            else 0.0
        if bound == UNLIMITED:
            continue
        held = used.get(resource) / unit
        if bound < held + asked:
            kind = "limit" if what == "limit" else "quota (the gang is non-preemptible)"
            return QueueRefusal("KAI", name, resource, _figures(
                resource, need.get(resource), used.get(resource), bound * unit, kind))
    return None


def kai_preemptible(podgroup: Mapping[str, Any], priority: int | None) -> bool:
    """``priority``: the value of the PodGroup's PriorityClass (None: none found, KAI's
    default pod group priority, 50, applies)."""
    said = (podgroup.get("spec") or {}).get("preemptibility")
    if said == "preemptible":
        return True
    if said == "non-preemptible":
        return False
    return (50 if priority is None else priority) < 100


# --- YuniKorn ------------------------------------------------------------------------------


def yunikorn_name(resource: str) -> str:
    return "vcore" if resource == "cpu" else resource


def yunikorn_amounts(resources: Resources) -> Resources:
    return Resources.of([(yunikorn_name(k), v) for k, v in resources.items()])


@dataclass(frozen=True, slots=True)
class YuniKornQueues:
    """The queue tree of one partition of ``queues.yaml``: each queue's full path (``root``,
    ``root.a``) and its ``resources.max``; and whether the partition has placement rules."""

    max: Mapping[str, Mapping[str, int]]
    placement_rules: bool


def yunikorn_queues(config: Mapping[str, Any], partition: str = "default"
                    ) -> YuniKornQueues:
    """From a parsed ``queues.yaml`` (keys as YuniKorn's YAML reads them: lower case).
    ValueError when it has no such partition."""
    for part in config.get("partitions") or []:
        if isinstance(part, Mapping) and str(part.get("name") or "").lower() == partition:
            limits: dict[str, dict[str, int]] = {}
            top = [q for q in part.get("queues") or [] if isinstance(q, Mapping)]
            if len(top) == 1 and str(top[0].get("name") or "").lower() == "root":
                _walk(top, "", limits)
            else:  # YuniKorn inserts the root queue above them (queue_config.md, Queues)
                limits["root"] = {}
                _walk(top, "root", limits)
            return YuniKornQueues(limits, bool(part.get("placementrules")))
    raise ValueError(f"queues.yaml has no partition {partition!r}")


def _walk(queues: Sequence[Any], parent: str, out: dict[str, dict[str, int]]) -> None:
    for queue in queues:
        if not isinstance(queue, Mapping) or not queue.get("name"):
            continue
        path = f"{parent}.{queue['name']}" if parent else str(queue["name"])
        path = path.lower()  # YuniKorn compares queue names without regard to case
        resources = queue.get("resources") or {}
        out[path] = bounds(resources.get("max") if isinstance(resources, Mapping) else {})
        _walk(queue.get("queues") or [], path, out)


def yunikorn_path(tree: YuniKornQueues, named: str | None) -> str | None:
    """The queue an application lands in, as YuniKorn's placement with no rules does it
    (placement.go: an implicit ``provided`` rule that creates nothing, then
    ``root.default``): the queue it names, made a full path under ``root``, when it
    exists, else ``root.default``. With placement rules configured the rules decide, and
    only a named queue that exists is judged (None: not judged)."""
    if named:
        path = named.lower() if named.lower().startswith("root.") else f"root.{named.lower()}"
        if path in tree.max:
            return path
    return None if tree.placement_rules else "root.default"


def yunikorn(tree: YuniKornQueues, path: str, usage: Mapping[str, Resources],
             need: Resources) -> QueueRefusal | None:
    """``usage``: what each queue's pods on nodes request, by full path, in YuniKorn's
    resource names (a queue's own pods only; its descendants' are added here)."""
    need = yunikorn_amounts(need)
    parts = path.split(".")
    for depth in range(len(parts), 0, -1):
        queue = ".".join(parts[:depth])
        cap = tree.max.get(queue)
        if not cap:
            continue
        held = Resources()
        for other, used in usage.items():
            if other == queue or other.startswith(queue + "."):
                held = held + used
        short = _over(need, held, cap)
        if short is not None:
            resource, used_amount, bound = short
            return QueueRefusal("YuniKorn", queue, resource, _figures(
                resource, need.get(resource), used_amount, bound, "max"))
    return None
