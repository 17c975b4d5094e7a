"""ProvisioningRequests and their PodTemplates (plain dicts, as YAML or the Kubernetes API
gives them) translated into a Demand. Every problem names the field it is about."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from provider.base import numbers
from provider.base.words import did_you_mean
from provider.domain.cloud import CapacityType
from provider.domain.demand import (
    CLASS_NAME,
    Demand,
    Operator,
    PodSet,
    Requirement,
    Toleration,
    Topology,
)
from provider.domain.devices.cel import request_cost_problem
from provider.domain.devices.from_api import (
    KINDS,
    DocumentObjects,
    DraObjects,
    NoObjects,
    is_dra_document,
    pod_claims,
)
from provider.domain.devices.quantity import quantity_milli
from provider.domain.gangs.topology import NetworkTopology
from provider.domain.model import Resources
from provider.domain.pods import container_requests, pod_requests
from provider.domain.shapes import Problems, items, mapping, text

API_GROUP = "autoscaling.x-k8s.io"
VERSIONS = ("v1", "v1beta1")
# The API's own limits, held here too: a request read from a file or sent to `Plan` never
# passed the API server's validation. podSets has maxItems 32 in the CRD; a pod set's
# count is an int32 there (so 2^31-1 at most), and at least 1.
MAX_POD_SETS = 32
MAX_COUNT = 2**31 - 1
# Written by allset's gang bridge for gangs of Kubernetes' own API (and readable on any
# request): on the request, the node labels every node of the gang shares (a PodGroup's
# schedulingConstraints.topology keys, carried for planning by topology); on a PodTemplate,
# the names of its pods' claims that a PodGroup shares, allocated once for the group and
# not once per pod (scheduling/v1beta1 of k8s.io/api v0.37.2, PodGroupResourceClaim).
TOPOLOGY_ANNOTATION = "allset.dev/topology-keys"
GROUP_CLAIMS_ANNOTATION = "allset.dev/group-claims"
# Also written by the gang bridge, for KAI and Volcano gangs (provider/domain/gangs/
# topology.py): the node labels the gang would rather share (KAI's preferred level), and a
# Volcano gang's bound on the HyperNode tiers it spans (``mode=hard,highestTierAllowed=2``).
PREFERRED_TOPOLOGY_ANNOTATION = "allset.dev/preferred-topology-keys"
NETWORK_TOPOLOGY_ANNOTATION = "allset.dev/network-topology"


class BadRequest(Exception):
    """A ProvisioningRequest that cannot be planned as written; nothing was changed."""

    def __init__(self, name: str, problems: Sequence[tuple[str, str]]) -> None:
        self.name = name
        self.problems = list(problems)
        super().__init__("; ".join(f"{f}: {m}" if f else m for f, m in self.problems))


@dataclass(frozen=True, slots=True)
class Parameters:
    topology: Topology = Topology.ZONE
    capacity_types: tuple[CapacityType, ...] = (CapacityType.RESERVED, CapacityType.ON_DEMAND)
    booking_seconds: float = 600.0
    valid_until_seconds: float | None = None
    no_retry: bool = False
    wait_for_nodes: bool = False
    expected_runtime_seconds: float | None = None
    max_wait_seconds: float | None = None
    allow_interruption: bool = False
    wait_value_per_gpu_hour: float | None = None
    data_zone: str | None = None
    cross_zone_cost_per_gpu_hour: float | None = None


PARAMETERS = ("topology", "capacityTypes", "bookingDurationSeconds", "validUntilSeconds",
              "noRetry", "waitForNodes", "expectedRuntimeSeconds", "maxWaitSeconds",
              "allowInterruption", "waitValuePerGpuHour", "dataZone",
              "crossZoneCostPerGpuHour")
# A zone's name as the clouds write it (us-east-1a, europe-west4-b): a label value.
_ZONE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_USD_PER_GPU_HOUR = {"waitValuePerGpuHour": "wait_value_per_gpu_hour",
                     "crossZoneCostPerGpuHour": "cross_zone_cost_per_gpu_hour"}
# Each number's upper bound (docs/provisioning-requests.md, "Limits"): a booking, a wait
# or a deadline beyond a week, a runtime beyond a year, a price beyond 1,000 USD per
# GPU-hour is a mistake or a tenant probing allset, and is refused with its reason.
WEEK = 7 * 86400
MOST_RUNTIME_SECONDS = 365 * 86400
MOST_SECONDS = {"bookingDurationSeconds": WEEK, "validUntilSeconds": WEEK,
                "maxWaitSeconds": WEEK, "expectedRuntimeSeconds": MOST_RUNTIME_SECONDS}
MOST_USD_PER_GPU_HOUR = 1000.0
_SECONDS = {"bookingDurationSeconds": "booking_seconds",
            "validUntilSeconds": "valid_until_seconds",
            "expectedRuntimeSeconds": "expected_runtime_seconds",
            "maxWaitSeconds": "max_wait_seconds"}
_FLAGS = {"noRetry": "no_retry", "waitForNodes": "wait_for_nodes",
          "allowInterruption": "allow_interruption"}


def request_name(request: Mapping[str, Any]) -> str:
    meta = _metadata(request)
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"


def _annotations(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    notes = _metadata(doc).get("annotations")
    return notes if isinstance(notes, Mapping) else {}


def _listed(value: Any) -> tuple[str, ...]:
    """A comma-separated annotation's items."""
    return tuple(x.strip() for x in str(value).split(",") if x.strip()) if value else ()


def _metadata(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """A document's metadata; one that is not an object names nothing (the document is
    then not found, or reported by its index)."""
    meta = doc.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def split_documents(docs: Iterable[Any], source: str
                    ) -> tuple[dict[str, Any], dict[str, Any], DocumentObjects]:
    """The one ProvisioningRequest, the PodTemplates (by name) and the DRA objects
    (ResourceClaimTemplates, ResourceClaims, DeviceClasses) of a multi-document file."""
    requests, templates, dra = [], {}, []
    for index, doc in enumerate(docs):
        if doc is None:
            continue
        kind = doc.get("kind") if isinstance(doc, dict) else None
        if kind == "ProvisioningRequest":
            requests.append(doc)
        elif kind == "PodTemplate":
            templates[str(_metadata(doc).get("name") or "")] = doc
        elif isinstance(doc, dict) and is_dra_document(doc):
            dra.append(doc)
        else:
            raise BadRequest(source, [(f"document {index}",
                                       f"kind {kind!r} is none of ProvisioningRequest, "
                                       "PodTemplate, " + ", ".join(KINDS))])
    if len(requests) != 1:
        raise BadRequest(source, [("", f"expected exactly one ProvisioningRequest, found "
                                       f"{len(requests)}")])
    return requests[0], templates, DocumentObjects(dra)


def parse_parameters(raw: Mapping[str, Any], name: str = "") -> Parameters:
    problems: list[tuple[str, str]] = []
    out: dict[str, Any] = {}
    for key, value in raw.items():
        field = f"spec.parameters.{key}"
        if value is None:
            problems.append((field, "no value: give one, or leave the parameter out"))
            continue
        text = str(value).strip()
        if key == "topology":
            try:
                out["topology"] = Topology(text)
            except ValueError:
                problems.append((field, f"{text!r} is not one of fabric, zone, none"))
        elif key == "capacityTypes":
            items = [t.strip() for t in text.split(",") if t.strip()]
            bad = [t for t in items if t not in CapacityType._value2member_map_]
            if bad or not items:
                problems.append((field, f"{text!r}: give a comma-separated list of reserved, "
                                        "on-demand, spot"))
            else:
                out["capacity_types"] = tuple(dict.fromkeys(CapacityType(t) for t in items))
        elif key in _SECONDS:
            try:
                out[_SECONDS[key]] = float(numbers.whole(text, MOST_SECONDS[key], least=1,
                                                         unit="of seconds"))
            except ValueError as err:
                problems.append((field, str(err)))
        elif key in _FLAGS:
            if text.lower() not in ("true", "false"):
                problems.append((field, f"{text!r} must be \"true\" or \"false\""))
            else:
                out[_FLAGS[key]] = text.lower() == "true"
        elif key in _USD_PER_GPU_HOUR:
            try:
                out[_USD_PER_GPU_HOUR[key]] = numbers.decimal(
                    text, MOST_USD_PER_GPU_HOUR, unit="of USD per GPU-hour")
            except ValueError as err:
                problems.append((field, str(err)))
        elif key == "dataZone":
            if not _ZONE.match(text):
                problems.append((field, f"{text!r} is not a zone name (lower-case letters, "
                                        "digits and '-', e.g. us-east-1a)"))
            else:
                out["data_zone"] = text
        else:
            problems.append((field, f"unknown parameter of class {CLASS_NAME}"
                                    f"{did_you_mean(key, PARAMETERS)}; known: "
                                    + ", ".join(PARAMETERS)))
    if problems:
        raise BadRequest(name, problems)
    return Parameters(**out)


def _wrong(value: Any, wanted: str, verb: str = "is not") -> str:
    """What is wrong with ``value``, which should be ``wanted``: "missing: <wanted>" for a
    key left out (a message never shows None), else "'<value>' <verb> <wanted>"."""
    return f"missing: {wanted}" if value is None else f"{value!r} {verb} {wanted}"


def demand_from(request: Mapping[str, Any], templates: Mapping[str, Mapping[str, Any]],
                objects: DraObjects | None = None) -> tuple[Demand, Parameters]:
    """The gang a ProvisioningRequest of our class asks for; its pods' DRA claims are
    looked up in ``objects``. Raises BadRequest."""
    name = request_name(request)
    namespace = str(_metadata(request).get("namespace") or "default")
    problems: Problems = []
    api = str(request.get("apiVersion") or "")
    group, _, version = api.partition("/")
    if group != API_GROUP or version not in VERSIONS:
        problems.append(("apiVersion", _wrong(api or None, f"{API_GROUP}/v1 or /v1beta1")))
    spec = mapping(request.get("spec"), "spec", problems)
    klass = spec.get("provisioningClassName")
    if klass != CLASS_NAME:
        problems.append(("spec.provisioningClassName",
                         f"{'missing' if klass is None else repr(klass)}: allset plans only "
                         f"{CLASS_NAME}"))
    raw_sets = spec.get("podSets") or []
    if not isinstance(raw_sets, list) or not 1 <= len(raw_sets) <= MAX_POD_SETS:
        given = f"{len(raw_sets)} pod sets" if isinstance(raw_sets, list) else "not a list"
        problems.append(("spec.podSets", f"{given}: a request has 1 to {MAX_POD_SETS} pod "
                                         "sets (the ProvisioningRequest API's limit)"))
        raw_sets = []
    try:
        params = parse_parameters(mapping(spec.get("parameters"), "spec.parameters",
                                          problems), name)
    except BadRequest as err:
        problems.extend(err.problems)
        params = Parameters()
    pod_sets = []
    for index, raw in enumerate(raw_sets):
        where = f"spec.podSets[{index}]"
        raw = mapping(raw, where, problems)
        ref = text(mapping(raw.get("podTemplateRef"), f"{where}.podTemplateRef", problems)
                   .get("name"), f"{where}.podTemplateRef.name", problems)
        count = raw.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or \
                not 1 <= count <= MAX_COUNT:
            problems.append((f"{where}.count", _wrong(
                count, f"an integer from 1 to {MAX_COUNT} (the API's int32)", "must be")))
            continue
        if not ref:
            problems.append((f"{where}.podTemplateRef.name", "missing"))
            continue
        template = templates.get(ref)
        if template is None:
            problems.append((f"{where}.podTemplateRef.name",
                             f"PodTemplate {ref!r} not found in the request's namespace"))
            continue
        try:
            pod_sets.append(pod_set_from(ref, count, template, namespace,
                                         objects or NoObjects()))
        except BadRequest as err:
            problems.extend((f"PodTemplate {ref}: {f}", m) for f, m in err.problems)
    names = [p.name for p in pod_sets]
    if len(set(names)) != len(names):
        problems.append(("spec.podSets", "two pod sets use the same PodTemplate"))
    too_costly = request_cost_problem(
        s.expression for p in pod_sets for claim in p.claims for r in claim.requests
        for o in r.options for s in o.selectors)
    if too_costly is not None:
        problems.append(("spec.podSets", too_costly))
    network = _network_topology(_annotations(request).get(NETWORK_TOPOLOGY_ANNOTATION),
                                problems)
    if problems:
        raise BadRequest(name, problems)
    demand = Demand(
        name=name,
        pod_sets=tuple(pod_sets),
        topology=params.topology,
        capacity_types=params.capacity_types,
        booking_seconds=params.booking_seconds,
        valid_until_seconds=params.valid_until_seconds,
        no_retry=params.no_retry,
        expected_runtime_seconds=params.expected_runtime_seconds,
        allow_interruption=params.allow_interruption,
        max_wait_seconds=params.max_wait_seconds,
        wait_value_per_gpu_hour=params.wait_value_per_gpu_hour,
        data_zone=params.data_zone,
        cross_zone_cost_per_gpu_hour=params.cross_zone_cost_per_gpu_hour,
        topology_keys=_listed(_annotations(request).get(TOPOLOGY_ANNOTATION)),
        preferred_topology_keys=_listed(
            _annotations(request).get(PREFERRED_TOPOLOGY_ANNOTATION)),
        network_topology=network,
    )
    return demand, params


def _network_topology(value: Any, problems: Problems) -> NetworkTopology | None:
    if not value:
        return None
    try:
        return NetworkTopology.parse(str(value))
    except ValueError as err:
        problems.append((f"metadata.annotations[{NETWORK_TOPOLOGY_ANNOTATION}]",
                         f"{value!r}: {err} (e.g. mode=hard,highestTierAllowed=2)"))
        return None


def pod_set_from(name: str, count: int, template: Mapping[str, Any], namespace: str = "default",
                 objects: DraObjects | None = None) -> PodSet:
    problems: Problems = []
    spec = mapping(mapping(template.get("template"), "template", problems).get("spec"),
                   "template.spec", problems)
    if problems:
        raise BadRequest(name, problems)
    if not spec.get("containers"):
        raise BadRequest(name, [("template.spec.containers", "a pod needs a container")])

    def resources(where: str, raw: Any) -> Resources:
        req = mapping(raw, where, problems)
        try:
            return container_requests(_quantities(req.get("requests")),
                                      _quantities(req.get("limits")))
        except ValueError as err:
            problems.append((where, str(err)))
            return Resources()

    containers = [resources(f"template.spec.containers[{i}].resources", c.get("resources"))
                  for i, c in enumerate(_objects(spec, "containers", problems))]
    inits = [(resources(f"template.spec.initContainers[{i}].resources", c.get("resources")),
              c.get("restartPolicy") == "Always")
             for i, c in enumerate(_objects(spec, "initContainers", problems))]
    try:
        overhead = Resources.of(_quantities(spec.get("overhead")))
    except ValueError as err:
        problems.append(("template.spec.overhead", str(err)))
        overhead = Resources()
    pod_level = resources("template.spec.resources", spec["resources"]) \
        if spec.get("resources") else None
    affinity = _affinity(mapping(spec.get("affinity"), "template.spec.affinity", problems),
                         problems)
    tolerations = tuple(_toleration(t, i, problems)
                        for i, t in enumerate(_objects(spec, "tolerations", problems)))
    selector = mapping(spec.get("nodeSelector"), "template.spec.nodeSelector", problems)
    claims = pod_claims(spec, namespace, objects or NoObjects(), problems,
                        shared=_listed(_annotations(template).get(GROUP_CLAIMS_ANNOTATION)))
    if problems:
        raise BadRequest(name, problems)
    return PodSet(
        name=name,
        count=count,
        requests=pod_requests(containers, inits, overhead, pod_level),
        node_selector=MappingProxyType({str(k): str(v) for k, v in selector.items()}),
        affinity=affinity,
        tolerations=tolerations,
        claims=claims,
    )


def _objects(spec: Mapping[str, Any], key: str, problems: Problems) -> list[Mapping[str, Any]]:
    """A pod spec's list of objects (containers, tolerations, ...), each one an object."""
    where = f"template.spec.{key}"
    return [mapping(raw, f"{where}[{i}]", problems)
            for i, raw in enumerate(items(spec.get(key), where, problems))]


def _quantities(raw: Any) -> dict[str, int]:
    if raw is not None and not isinstance(raw, Mapping):
        raise ValueError("requests, limits and overhead must be objects of quantities")
    return {str(k): quantity_milli(v) for k, v in (raw or {}).items()}


def _affinity(raw: Mapping[str, Any], problems: Problems
              ) -> tuple[tuple[Requirement, ...], ...]:
    at = "template.spec.affinity.nodeAffinity"
    node = mapping(raw.get("nodeAffinity"), at, problems)
    at += ".requiredDuringSchedulingIgnoredDuringExecution"
    required = mapping(node.get("requiredDuringSchedulingIgnoredDuringExecution"), at,
                       problems)
    terms = []
    listed = items(required.get("nodeSelectorTerms"), f"{at}.nodeSelectorTerms", problems)
    for ti, raw_term in enumerate(listed):
        where = f"{at}.nodeSelectorTerms[{ti}]"
        term = mapping(raw_term, where, problems)
        if term.get("matchFields"):
            problems.append((f"{where}.matchFields", "not supported: select nodes by labels"))
        reqs = []
        exprs = items(term.get("matchExpressions"), f"{where}.matchExpressions", problems)
        for ei, raw_expr in enumerate(exprs):
            expr = mapping(raw_expr, f"{where}.matchExpressions[{ei}]", problems)
            try:
                op = Operator(str(expr.get("operator")))
            except ValueError:
                problems.append((f"{where}.matchExpressions[{ei}].operator", _wrong(
                    expr.get("operator"), "one of " + ", ".join(o.value for o in Operator))))
                continue
            values = items(expr.get("values"), f"{where}.matchExpressions[{ei}].values",
                           problems)
            reqs.append(Requirement(str(expr.get("key", "")), op, tuple(map(str, values))))
        terms.append(tuple(reqs))
    return tuple(terms)


def _toleration(raw: Mapping[str, Any], index: int, problems: Problems) -> Toleration:
    operator = raw.get("operator") or "Equal"
    if operator not in ("Equal", "Exists"):
        problems.append((f"template.spec.tolerations[{index}].operator",
                         f"{operator!r} is not Equal or Exists"))
    at = f"template.spec.tolerations[{index}]"
    return Toleration(key=text(raw.get("key"), f"{at}.key", problems) or None,
                      operator=operator, value=str(raw.get("value") or ""),
                      effect=text(raw.get("effect"), f"{at}.effect", problems) or None)
