"""Who may call what over mTLS (pure: no gRPC here, so the CLI can show the defaults
without loading it).

Every client certificate signed by the allset CA gets through the handshake; what it may
then call depends on its subject's Common Name:

- the autoscaler identity (CA's client certificate, CN ``cluster-autoscaler``) may call the
  CloudProvider service and nothing else: it has no business reading every booking;
- an operator identity (CN ``allset-operator``, `allset certs`' operator.crt) may call the
  admin service and CloudProvider's read-only methods, never one that changes the cloud:
  a certificate handed to people to inspect allset must not be able to delete nodes;
- any other certificate may call nothing but health and reflection.

The names are serve flags (--autoscaler-cn, --operator-cn) whose defaults are what
`allset certs` and deploy/kubernetes/base/certificates.yaml issue."""

from __future__ import annotations

from dataclasses import dataclass

AUTOSCALER_CN = "cluster-autoscaler"
OPERATOR_CN = "allset-operator"

CLOUD_PROVIDER = "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider"
ADMIN = "allset.admin.v1.Admin"
# Open to any client that completed the handshake: probes and tools that list services.
OPEN = ("grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection",
        "grpc.reflection.v1.ServerReflection")
# CloudProvider methods that change nothing (no launch, no termination, no target size, no
# cloud call). An allowlist, so that a method added to the proto later is the autoscaler's
# only until someone decides otherwise. Refresh is left out: it sets off a cloud listing.
READ_ONLY = frozenset({
    "NodeGroups", "NodeGroupForNode", "PricingNodePrice", "PricingPodPrice", "GPULabel",
    "GetAvailableGPUTypes", "NodeGroupTargetSize", "NodeGroupNodes",
    "NodeGroupTemplateNodeInfo", "NodeGroupGetOptions",
})


@dataclass(frozen=True, slots=True)
class Identities:
    """The Common Names of the autoscaler's and the operators' client certificates."""

    autoscaler: frozenset[str] = frozenset({AUTOSCALER_CN})
    operators: frozenset[str] = frozenset({OPERATOR_CN})

    def overlap(self) -> frozenset[str]:
        """Names given as both: a certificate that is both would be refused nothing."""
        return self.autoscaler & self.operators


def split_method(method: str) -> tuple[str, str]:
    """("package.Service", "Method") of a gRPC method path "/package.Service/Method"."""
    service, _, name = method.lstrip("/").partition("/")
    return service, name


def is_open(method: str) -> bool:
    return split_method(method)[0] in OPEN


def refusal(identities: Identities, method: str, common_name: str | None,
            subject: str) -> str | None:
    """Why the client whose certificate has ``common_name`` (and reads ``subject``) may
    not call ``method``, in one line naming what it was taken for; None if it may."""
    service, name = split_method(method)
    if service in OPEN:
        return None
    who = f'client "{subject}" may not call {service}/{name}'
    autoscaler = common_name in identities.autoscaler
    operator = common_name in identities.operators
    if service == CLOUD_PROVIDER:
        if autoscaler or (operator and name in READ_ONLY):
            return None
        if operator:
            return (f"{who}: it is an operator identity, which may call the admin service and "
                    "CloudProvider's read-only methods; only the autoscaler identity "
                    f"({_names('--autoscaler-cn', identities.autoscaler)}) changes the cloud")
    elif service == ADMIN:
        if operator:
            return None
        return (f"{who}: it is not an operator identity "
                f"({_names('--operator-cn', identities.operators)}); use the operator "
                "certificate (operator.crt from `allset certs`, or the allset-operator-tls "
                "secret)")
    if autoscaler or operator:
        return f"{who}: no identity may call {service}"
    return (f"{who}: it is neither the autoscaler identity "
            f"({_names('--autoscaler-cn', identities.autoscaler)}) nor an operator identity "
            f"({_names('--operator-cn', identities.operators)})")


def _names(flag: str, names: frozenset[str]) -> str:
    """As the flags take them (a bare common name each), so the hint can be copied."""
    return ", ".join(f"serve {flag} {n}" for n in sorted(names))
