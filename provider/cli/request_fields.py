"""`allset plan --request`: every field of the file's documents must be a field of its
Kubernetes type. A misspelt field (`nodeSelectr`, `podSet`, `operatr`) is refused with its
path and the closest known name, as `kubectl apply --validate=strict` refuses it, rather
than planned as if it were not there (the plan would then be for another request).

The fields of Kubernetes' own types come from the official Python client's models: each
model's ``attribute_map`` (the JSON names) and ``openapi_types`` (their types), generated
from the API's OpenAPI document. The ProvisioningRequest is a CRD the client does not
model; its fields are those of autoscaling.x-k8s.io/v1 ProvisioningRequest as declared in
kubernetes/autoscaler (cluster-autoscaler/apis/provisioningrequest/autoscaling.x-k8s.io/
v1/types.go; v1beta1 declares the same fields)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from provider.base.words import did_you_mean

# A schema is a model's name in the client ("V1PodSpec"), a type expression of the
# client's ("List[V1Container]", "Dict[str, str]", "str"), a dict of field -> schema (an
# object the client does not model) or a one-item list (a list of that schema).
Schema = str | dict[str, Any] | list[Any]

_PROVISIONING_REQUEST: dict[str, Any] = {
    "apiVersion": "str", "kind": "str", "metadata": "V1ObjectMeta",
    "spec": {"provisioningClassName": "str", "parameters": "Dict[str, str]",
             "podSets": [{"podTemplateRef": {"name": "str"}, "count": "int"}]},
    "status": {"conditions": "List[V1Condition]", "provisioningClassDetails": "Dict[str, str]"},
}
_LIST = re.compile(r"^List\[(.+)\]$")
_MAP = re.compile(r"^Dict\[str, (.+)\]$")
_OPAQUE = {"str", "int", "float", "bool", "datetime", "date", "object"}
_CLIENT_NAMES = {("resource.k8s.io", "ResourceClaim"): "ResourceV1ResourceClaim"}


def unknown_fields(doc: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(path, problem) for each field of ``doc`` its kind does not have; [] for a kind
    this module cannot name (the parser then refuses the kind itself)."""
    schema = _schema_of(doc)
    return [] if schema is None else list(_walk(doc, schema, ""))


def _schema_of(doc: Mapping[str, Any]) -> Schema | None:
    kind, api = str(doc.get("kind") or ""), str(doc.get("apiVersion") or "")
    group, _, version = api.rpartition("/")
    if kind == "ProvisioningRequest":
        return _PROVISIONING_REQUEST
    name = _CLIENT_NAMES.get((group, kind)) if version == "v1" else None
    name = name or f"{version[:1].upper()}{version[1:]}{kind}"
    return name if _model(name) is not None else None


def _model(name: str) -> Any:
    import kubernetes.client

    model = getattr(kubernetes.client, name, None)
    return model if hasattr(model, "attribute_map") else None


def _walk(value: Any, schema: Schema, path: str) -> Iterator[tuple[str, str]]:
    if isinstance(schema, list):
        if isinstance(value, list):
            for i, item in enumerate(value):
                yield from _walk(item, schema[0], f"{path}[{i}]")
        return
    if isinstance(schema, dict):
        yield from _fields(value, schema, path, "")
        return
    if (inner := _LIST.match(schema)) is not None:
        yield from _walk(value, [inner.group(1)], path)
    elif (inner := _MAP.match(schema)) is not None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                yield from _walk(item, inner.group(1), f"{path}.{key}" if path else str(key))
    elif schema not in _OPAQUE and (model := _model(schema)) is not None:
        fields = {model.attribute_map[a]: t for a, t in model.openapi_types.items()}
        yield from _fields(value, fields, path, re.sub(r"^V\d+(alpha|beta)?\d*", "", schema))


def _fields(value: Any, fields: Mapping[str, Schema], path: str, type_name: str
            ) -> Iterator[tuple[str, str]]:
    """A value's keys against its object's fields (a value that is no object is the
    parser's to refuse)."""
    if not isinstance(value, Mapping):
        return
    for key, item in value.items():
        where = f"{path}.{key}" if path else str(key)
        if key in fields:
            yield from _walk(item, fields[key], where)
            continue
        hint = did_you_mean(str(key), fields)
        if not hint and len(fields) <= 12:
            hint = "; known: " + ", ".join(sorted(fields))
        elif not hint and type_name:
            hint = f": {type_name} has no such field"
        yield where, f"unknown field{hint}"


def refuse_unknown_fields(docs: list[Any], source: str) -> None:
    """Raise UsageError naming every unknown field of the file's documents, one a line."""
    from provider.cli.errors import UsageError

    lines = []
    for index, doc in enumerate(docs):
        if not isinstance(doc, Mapping):
            continue
        meta = doc.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        label = f"{doc.get('kind') or 'document'} {name or f'(document {index})'}"
        lines += [f"  {label}: {path}: {problem}" for path, problem in unknown_fields(doc)]
    if lines:
        raise UsageError(f"{source}:\n" + "\n".join(lines))
