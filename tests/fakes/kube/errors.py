"""API errors as the Kubernetes API server reports them: a `Status` object whose `code`
and `reason` say what went wrong (apimachinery's `StatusReason` values)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True)
class Cause:
    """One field-level problem of a 422 Invalid answer."""

    field: str
    reason: str  # FieldValueRequired, FieldValueInvalid, FieldValueForbidden, ...
    message: str


@dataclass
class ApiError(Exception):
    code: int
    reason: str
    message: str
    details: Json = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.code} {self.reason}: {self.message}"

    def status(self) -> Json:
        out: Json = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                     "status": "Failure", "message": self.message, "reason": self.reason,
                     "code": self.code}
        if self.details:
            out["details"] = self.details
        return out


def _details(qualified: str, name: str, kind: str) -> Json:
    group = qualified.partition(".")[2]
    out: Json = {"name": name, "kind": kind}
    if group:
        out["group"] = group
    return out


def not_found(qualified: str, name: str) -> ApiError:
    """``qualified`` is the resource as the server names it: ``pods`` or
    ``provisioningrequests.autoscaling.x-k8s.io``."""
    plural = qualified.partition(".")[0]
    return ApiError(404, "NotFound", f'{qualified} "{name}" not found',
                    _details(qualified, name, plural))


def already_exists(qualified: str, name: str) -> ApiError:
    plural = qualified.partition(".")[0]
    return ApiError(409, "AlreadyExists", f'{qualified} "{name}" already exists',
                    _details(qualified, name, plural))


def conflict(qualified: str, name: str, why: str = "") -> ApiError:
    plural = qualified.partition(".")[0]
    why = why or ("the object has been modified; please apply your changes to the latest "
                  "version and try again")
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {qualified} "{name}": {why}',
                    _details(qualified, name, plural))


def invalid(kind_group: str, kind: str, name: str, causes: list[Cause]) -> ApiError:
    """``kind_group`` is ``Kind.group`` (``ProvisioningRequest.autoscaling.x-k8s.io``) or
    just ``Kind`` for the core group."""
    texts = [f"{c.field}: {c.message}" for c in causes]
    listed = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details = _details(kind_group, name, kind)
    details["causes"] = [{"reason": c.reason, "message": c.message, "field": c.field}
                         for c in causes]
    return ApiError(422, "Invalid", f'{kind_group} "{name}" is invalid: {listed}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed() -> ApiError:
    return ApiError(405, "MethodNotAllowed",
                    "the server does not allow this method on the requested resource")


def no_route() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def unsupported_media_type(content_type: str, accepted: tuple[str, ...]) -> ApiError:
    return ApiError(415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media "
                    f"types include: {', '.join(accepted)} (got {content_type or 'none'})")


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def not_modelled(what: str) -> ApiError:
    """A real API feature this fake leaves out: fail loudly rather than answer wrongly."""
    return ApiError(501, "NotImplemented", f"fakekube does not model {what}")
