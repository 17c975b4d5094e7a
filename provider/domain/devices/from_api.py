"""resource.k8s.io/v1 objects (plain dicts, as YAML or the API gives them) translated into
claims with their DeviceClasses resolved. Every problem names the field it is about.

Field names follow https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/
(ResourceClaimTemplate, ResourceClaim, DeviceClass, v1). A pod's `spec.resourceClaims[]`
names each claim and either a template (one claim per pod) or a ResourceClaim (one claim
shared by every pod that names it).

A selector beyond Kubernetes' bounds (its length, its cost) or nested deeper than allset
evaluates (provider.domain.devices.limits) is a problem of its field, as the API server
would make it: the request is invalid, not merely unplannable."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from provider.domain.devices.cel import selector_problem
from provider.domain.devices.claims import (
    AllocationMode,
    Claim,
    DeviceRequest,
    MatchAttribute,
    RequestOption,
    Selector,
)
from provider.domain.devices.limits import MAX_SELECTORS
from provider.domain.shapes import items, mapping, text

GROUP = "resource.k8s.io"
KINDS = ("ResourceClaimTemplate", "ResourceClaim", "DeviceClass")
Problems = list[tuple[str, str]]
# Bounds on what one pod set's claims may ask, so that matching them costs a bounded
# amount per group (issue 32). Device requests per claim: the API's own limit
# (DeviceRequestsMaxSize, 32, in resource.k8s.io/v1), held here for claims read from a
# file. Claims per pod: Kubernetes sets none on spec.resourceClaims; allset takes the
# same 32, far beyond the one or two claims a GPU pod has.
MAX_POD_CLAIMS = 32
MAX_CLAIM_REQUESTS = 32


class DraObjects(Protocol):
    """Where a pod's claims are looked up: the API, or the documents of a request file."""

    def resource_claim_template(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        """None when it does not exist."""

    def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...

    def device_class(self, name: str) -> Mapping[str, Any] | None: ...


class NoObjects:
    """No DRA objects at all (a file without them)."""

    def resource_claim_template(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return None

    def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return None

    def device_class(self, name: str) -> Mapping[str, Any] | None:
        return None


class DocumentObjects:
    """DRA objects given next to a request in one multi-document file."""

    def __init__(self, documents: Iterable[Mapping[str, Any]]) -> None:
        self._by: dict[tuple[str, str, str], Mapping[str, Any]] = {}
        for doc in documents:
            meta = doc.get("metadata")
            meta = meta if isinstance(meta, Mapping) else {}  # then it is never found
            namespace = "" if doc.get("kind") == "DeviceClass" else str(
                meta.get("namespace") or "")
            self._by[(str(doc.get("kind")), namespace, str(meta.get("name") or ""))] = doc

    def _get(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        # A document without a namespace belongs to the request's.
        return self._by.get((kind, namespace, name)) or self._by.get((kind, "", name))

    def resource_claim_template(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._get("ResourceClaimTemplate", namespace, name)

    def resource_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._get("ResourceClaim", namespace, name)

    def device_class(self, name: str) -> Mapping[str, Any] | None:
        return self._get("DeviceClass", "", name)


def is_dra_document(doc: Mapping[str, Any]) -> bool:
    return str(doc.get("apiVersion", "")).startswith(f"{GROUP}/") and doc.get("kind") in KINDS


def pod_claims(spec: Mapping[str, Any], namespace: str, objects: DraObjects,
               problems: Problems, where: str = "template.spec",
               shared: Iterable[str] = ()) -> tuple[Claim, ...]:
    """The claims of a pod spec, resolved; problems are appended, not raised.
    ``shared``: names of claims the pods share whatever their reference (a PodGroup's
    claims: one allocation for the group, even when made from a template)."""
    group = frozenset(shared)
    raw = items(spec.get("resourceClaims"), f"{where}.resourceClaims", problems)
    if len(raw) > MAX_POD_CLAIMS:
        problems.append((f"{where}.resourceClaims", f"{len(raw)} claims: a pod may have at "
                                                    f"most {MAX_POD_CLAIMS} (allset's limit)"))
        return ()
    out = []
    classes: dict[str, tuple[Selector, ...] | None] = {}
    for index, entry in enumerate(raw):
        at = f"{where}.resourceClaims[{index}]"
        entry = entry if isinstance(entry, Mapping) else {}
        name = str(entry.get("name") or "")
        template = entry.get("resourceClaimTemplateName")
        claim_name = entry.get("resourceClaimName")
        if not name:
            problems.append((f"{at}.name", "missing"))
            continue
        if bool(template) == bool(claim_name):
            problems.append((at, "give exactly one of resourceClaimTemplateName and "
                                 "resourceClaimName"))
            continue
        if template:
            found = objects.resource_claim_template(namespace, str(template))
            if found is None:
                problems.append((f"{at}.resourceClaimTemplateName",
                                 f"ResourceClaimTemplate {template!r} not found in namespace "
                                 f"{namespace}"))
                continue
            origin = f"ResourceClaimTemplate {template}"
            devices = _field(found, ("spec", "spec", "devices"), origin, problems)
        else:
            found = objects.resource_claim(namespace, str(claim_name))
            if found is None:
                problems.append((f"{at}.resourceClaimName",
                                 f"ResourceClaim {claim_name!r} not found in namespace "
                                 f"{namespace}"))
                continue
            origin = f"ResourceClaim {claim_name}"
            if _field(found, ("status",), origin, problems).get("allocation"):
                problems.append((f"{at}.resourceClaimName",
                                 f"ResourceClaim {claim_name!r} is already allocated; its "
                                 "pods go where its devices are, not to new nodes"))
                continue
            devices = _field(found, ("spec", "devices"), origin, problems)
        claim = _claim(name, devices, bool(claim_name) or name in group, objects, classes,
                       problems, origin)
        if claim is not None:
            out.append(claim)
    return tuple(out)


def _field(obj: Mapping[str, Any], path: tuple[str, ...], origin: str, problems: Problems,
           ) -> Mapping[str, Any]:
    """The object at ``path`` in an API object (empty when absent or not an object)."""
    for depth, key in enumerate(path, 1):
        obj = mapping(obj.get(key), f"{origin}: {'.'.join(path[:depth])}", problems)
    return obj


def _claim(name: str, devices: Mapping[str, Any], shared: bool, objects: DraObjects,
           classes: dict[str, tuple[Selector, ...] | None], problems: Problems,
           origin: str) -> Claim | None:
    before = len(problems)
    requests = []
    raw_requests = items(devices.get("requests"), f"{origin}: spec.devices.requests",
                         problems)
    if len(raw_requests) > MAX_CLAIM_REQUESTS:
        problems.append((f"{origin}: spec.devices.requests",
                         f"{len(raw_requests)} requests: a claim has at most "
                         f"{MAX_CLAIM_REQUESTS} (DeviceRequestsMaxSize of resource.k8s.io)"))
        return None
    for index, raw in enumerate(raw_requests):
        at = f"{origin}: spec.devices.requests[{index}]"
        raw = raw if isinstance(raw, Mapping) else {}
        rname = str(raw.get("name") or "")
        if not rname:
            problems.append((f"{at}.name", "missing"))
            continue
        if raw.get("exactly") and raw.get("firstAvailable"):
            problems.append((at, "give one of exactly and firstAvailable"))
            continue
        if raw.get("firstAvailable"):
            subs = items(raw["firstAvailable"], f"{at}.firstAvailable", problems)
            bodies = [mapping(sub, f"{at}.firstAvailable[{i}]", problems)
                      for i, sub in enumerate(subs)]
            options = [_option(f"{rname}/{body.get('name')}", body, objects, classes,
                               problems, f"{at}.firstAvailable[{i}]")
                       for i, body in enumerate(bodies)]
        else:
            # v1 puts the request under `exactly`; v1beta1 wrote it on the request itself.
            body = mapping(raw.get("exactly") or raw, f"{at}.exactly", problems)
            options = [_option(rname, body, objects, classes, problems, f"{at}.exactly")]
        kept = tuple(o for o in options if o is not None)
        if kept:
            requests.append(DeviceRequest(rname, kept))
    if not requests and len(problems) == before:
        problems.append((f"{origin}: spec.devices.requests", "a claim needs a request"))
    names = {r.name for r in requests}
    constraints = []
    for index, raw in enumerate(items(devices.get("constraints"),
                                      f"{origin}: spec.devices.constraints", problems)):
        at = f"{origin}: spec.devices.constraints[{index}]"
        raw = raw if isinstance(raw, Mapping) else {}
        attribute = raw.get("matchAttribute")
        if not attribute or "/" not in str(attribute):
            problems.append((f"{at}.matchAttribute",
                             "needs a fully qualified attribute (domain/name); allset "
                             "models matchAttribute constraints only"))
            continue
        listed = tuple(str(r) for r in items(raw.get("requests"), f"{at}.requests", problems))
        unknown = [r for r in listed if r.split("/")[0] not in names]
        if unknown:
            problems.append((f"{at}.requests", f"unknown request {', '.join(unknown)}"))
            continue
        constraints.append(MatchAttribute(str(attribute), listed))
    if len(problems) != before:
        return None
    return Claim(name, tuple(requests), tuple(constraints), shared)


def _option(name: str, body: Mapping[str, Any], objects: DraObjects,
            classes: dict[str, tuple[Selector, ...] | None], problems: Problems,
            at: str) -> RequestOption | None:
    class_name = str(body.get("deviceClassName") or "")
    if not class_name:
        problems.append((f"{at}.deviceClassName", "missing"))
        return None
    if class_name not in classes:
        found = objects.device_class(class_name)
        origin = f"DeviceClass {class_name}"
        classes[class_name] = None if found is None else _selectors(
            _field(found, ("spec",), origin, problems).get("selectors"), origin,
            f"{origin}: spec.selectors", problems)
    class_selectors = classes[class_name]
    if class_selectors is None:
        problems.append((f"{at}.deviceClassName", f"DeviceClass {class_name!r} not found"))
        return None
    mode_text = str(body.get("allocationMode") or "ExactCount")
    try:
        mode = AllocationMode(mode_text)
    except ValueError:
        problems.append((f"{at}.allocationMode", f"{mode_text!r} is not ExactCount or All"))
        return None
    count = body.get("count", 1) if mode is AllocationMode.EXACT_COUNT else 0
    if mode is AllocationMode.EXACT_COUNT and (not isinstance(count, int) or count < 1):
        problems.append((f"{at}.count", f"{count!r} must be an integer >= 1"))
        return None
    if body.get("capacity"):
        problems.append((f"{at}.capacity", "consumable capacity requests are not planned by "
                                           "allset"))
        return None
    own = _selectors(body.get("selectors"), f"request {name}", f"{at}.selectors", problems)
    return RequestOption(name, class_name, class_selectors + own, mode, int(count))


def _selectors(raw: Any, origin: str, at: str, problems: Problems) -> tuple[Selector, ...]:
    """The CEL selectors of a request or a DeviceClass, each within the limits Kubernetes
    and allset's evaluator set (a problem of its field when not)."""
    listed = items(raw, at, problems)
    if len(listed) > MAX_SELECTORS:
        problems.append((at, f"has {len(listed)} selectors; Kubernetes allows at most "
                             f"{MAX_SELECTORS} (resource.k8s.io DeviceSelectorsMaxSize)"))
        return ()
    out = []
    for index, item in enumerate(listed):
        field = f"{at}[{index}].cel"
        cel = mapping(mapping(item, f"{at}[{index}]", problems).get("cel"), field, problems)
        expr = text(cel.get("expression"), f"{field}.expression", problems)
        why = selector_problem(expr) if expr else None
        if why is not None:
            problems.append((f"{field}.expression", f"the selector {why}"))
        elif expr:
            out.append(Selector(expr, origin))
    return tuple(out)
