"""The google-cloud-compute clients allset uses, all built with the same options.

REST transport throughout. Every client shares the endpoint and credentials, so operations
are polled where they were created: the ``*_unary`` calls return the Operation, and a
ZoneOperationsClient built here waits on it. (``bulk_insert(...).result()`` would poll the
public endpoint whatever ``api_endpoint`` says.)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import requests
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import compute_v1
from requests.adapters import HTTPAdapter

from adapters.gcp.settings import GcpSettings

_Client = TypeVar("_Client", bound=Any)


@dataclass(frozen=True, slots=True)
class Clients:
    instances: compute_v1.InstancesClient
    reservations: compute_v1.ReservationsClient
    machine_types: compute_v1.MachineTypesClient
    regions: compute_v1.RegionsClient
    zone_operations: compute_v1.ZoneOperationsClient
    instance_templates: compute_v1.InstanceTemplatesClient
    future_reservations: compute_v1.FutureReservationsClient

    def close(self) -> None:
        for client in (self.instances, self.reservations, self.machine_types, self.regions,
                       self.zone_operations, self.instance_templates,
                       self.future_reservations):
            client.transport.close()  # type: ignore[no-untyped-call]


# requests keeps 10 connections to a host per session and closes any beyond that after
# its call: the executor's part threads, the controller's workers and CA's scale-ups may
# each be in a bulkInsert at once, and the instance workers and operation waits besides.
CONNECTIONS = 64


def _pooled(client: _Client) -> _Client:
    """The client, its REST session keeping ``CONNECTIONS`` connections per host. The
    session is the transport's own (google-cloud-compute builds it in the transport's
    __init__ and offers no option for its pool); a transport without one keeps its
    default."""
    session = getattr(client.transport, "_session", None)
    if isinstance(session, requests.Session):
        for prefix in ("https://", "http://"):
            session.mount(prefix, HTTPAdapter(pool_connections=CONNECTIONS,
                                              pool_maxsize=CONNECTIONS))
    return client


def build(settings: GcpSettings) -> Clients:
    options = ClientOptions(api_endpoint=settings.api_endpoint) if settings.api_endpoint \
        else ClientOptions()
    # Production: Application Default Credentials (workload identity, a key file...).
    credentials: Credentials | None = None
    if settings.local:
        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]

    return Clients(
        instances=_pooled(compute_v1.InstancesClient(
            client_options=options, credentials=credentials, transport="rest")),
        reservations=compute_v1.ReservationsClient(
            client_options=options, credentials=credentials, transport="rest"),
        machine_types=compute_v1.MachineTypesClient(
            client_options=options, credentials=credentials, transport="rest"),
        regions=compute_v1.RegionsClient(
            client_options=options, credentials=credentials, transport="rest"),
        zone_operations=_pooled(compute_v1.ZoneOperationsClient(
            client_options=options, credentials=credentials, transport="rest")),
        instance_templates=compute_v1.InstanceTemplatesClient(
            client_options=options, credentials=credentials, transport="rest"),
        future_reservations=compute_v1.FutureReservationsClient(
            client_options=options, credentials=credentials, transport="rest"),
    )
