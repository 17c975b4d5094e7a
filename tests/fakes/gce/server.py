"""A fake Compute Engine REST API on 127.0.0.1 (plain HTTP) for the real
google-cloud-compute client: ``ClientOptions(api_endpoint="http://127.0.0.1:PORT")``.
Bodies are camelCase JSON with int64 values as strings, as the real API sends them."""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.gce import fields, filters
from tests.fakes.gce.bulk import bulk_insert, last
from tests.fakes.gce.model import (
    ApiError,
    Compute,
    FutureReservationRec,
    InstanceRec,
    MachineType,
    OperationRec,
    ReservationRec,
)

API = "https://www.googleapis.com/compute/v1"
MAX_PAGE = 500

Json = dict[str, Any]
Handler = Callable[["Request"], Json]


class Request:
    def __init__(self, compute: Compute, match: re.Match[str], query: dict[str, str],
                 body: Json) -> None:
        self.compute = compute
        self.params = match.groupdict()
        self.query = query
        self.body = body

    @property
    def zone(self) -> str:
        zone = self.params["zone"]
        if zone not in self.compute.zones:
            raise ApiError(404, "notFound", f"zone {zone} not found")
        return zone


# --- rendering ---------------------------------------------------------------------------


def zone_url(c: Compute, zone: str) -> str:
    return f"{API}/projects/{c.project}/zones/{zone}"


def render_instance(c: Compute, i: InstanceRec) -> Json:
    out: Json = {
        "kind": "compute#instance", "id": str(i.id), "name": i.name,
        "zone": zone_url(c, i.zone), "machineType": f"{zone_url(c, i.zone)}/machineTypes/"
        f"{i.machine_type}", "status": i.status, "labels": i.labels,
        "labelFingerprint": i.fingerprint, "creationTimestamp": i.created,
        "selfLink": f"{zone_url(c, i.zone)}/instances/{i.name}",
        "scheduling": {"provisioningModel": i.provisioning_model,
                       "instanceTerminationAction": i.termination_action},
        "reservationAffinity": {"consumeReservationType": i.affinity},
    }
    if i.network_interfaces:
        out["networkInterfaces"] = [{"name": f"nic{n}", **nic}
                                    for n, nic in enumerate(i.network_interfaces)]
    if i.reservation is not None:
        # Which reservation the VM consumes, by its full resource name (Instance
        # resourceStatus.reservationConsumptionInfo.consumedReservation, Compute v1).
        r = c.reservation(i.zone, i.reservation)
        owner = r.project if r is not None and r.project else c.project
        out["resourceStatus"] = {"reservationConsumptionInfo": {
            "consumedReservation": f"projects/{owner}/zones/{i.zone}/reservations/"
                                   f"{last(i.reservation)}"}}
    if c.metadata_bytes:  # what real instances carry: bootstrap scripts, disks, NICs
        out["metadata"] = {"items": [{"key": "startup-script",
                                      "value": "#" * c.metadata_bytes}]}
        out["disks"] = [{"boot": True, "deviceName": "boot", "diskSizeGb": "200",
                         "source": f"{zone_url(c, i.zone)}/disks/{i.name}"}]
        out.setdefault("networkInterfaces", [{
            "name": "nic0", "networkIP": "10.0.0.2",
            "subnetwork": f"{API}/projects/{c.project}/regions/{c.region}/subnetworks/default"}])
        out["serviceAccounts"] = [{"email": "nodes@proj.iam.gserviceaccount.com",
                                   "scopes": ["https://www.googleapis.com/auth/cloud-platform"]}]
    if i.accelerators:
        out["guestAccelerators"] = [{"acceleratorType": t, "acceleratorCount": n}
                                    for t, n in i.accelerators]
    if i.resource_policies:
        out["resourcePolicies"] = [f"{API}/projects/{c.project}/regions/{c.region}/"
                                   f"resourcePolicies/{p}" for p in i.resource_policies]
    return out


def render_reservation(c: Compute, r: ReservationRec) -> Json:
    props: Json = {"machineType": r.machine_type}
    if r.accelerators:
        props["guestAccelerators"] = [{"acceleratorType": t, "acceleratorCount": n}
                                      for t, n in r.accelerators]
    owner = r.project or c.project
    sku: Json = {"count": str(r.count), "inUseCount": str(c.in_use(r))}
    if r.source_template is not None:
        sku["sourceInstanceTemplate"] = \
            f"{API}/projects/{c.project}/global/instanceTemplates/{r.source_template}"
    else:
        sku["instanceProperties"] = props
    if r.assured_count is not None:
        sku["assuredCount"] = str(r.assured_count)
    out: Json = {
        "kind": "compute#reservation", "name": r.name,
        "zone": f"{API}/projects/{owner}/zones/{r.zone}",
        "status": r.status, "specificReservationRequired": r.specific_required,
        "specificReservation": sku,
    }
    out["creationTimestamp"] = r.created
    if r.delete_at is not None:
        out["deleteAtTime"] = r.delete_at
    if r.delete_after_seconds is not None:
        out["deleteAfterDuration"] = {"seconds": str(r.delete_after_seconds)}
    if r.deployment_type:
        out["deploymentType"] = r.deployment_type
    if r.shared_with:
        out["shareSettings"] = {"shareType": "SPECIFIC_PROJECTS", "projectMap": {
            p: {"projectId": p} for p in r.shared_with}}
    if r.resource_policies:
        out["resourcePolicies"] = {
            f"policy-{n}": f"{API}/projects/{owner}/regions/{c.region}/resourcePolicies/{p}"
            for n, p in enumerate(r.resource_policies)}
    return out


def owned_by(req: Request, r: ReservationRec) -> bool:
    return (r.project or req.compute.project) == req.params["project"]


def reservation_ref(req: Request, name: str) -> str:
    project = req.params["project"]
    return name if project == req.compute.project else f"projects/{project}/reservations/{name}"


def render_operation(c: Compute, op: OperationRec) -> Json:
    out: Json = {
        "kind": "compute#operation", "id": op.name.rsplit("-", 1)[-1], "name": op.name,
        "zone": zone_url(c, op.zone), "operationType": op.kind,
        "targetLink": f"{zone_url(c, op.zone)}/instances/{op.target}",
        "status": "DONE" if op.done else "RUNNING", "progress": 100 if op.done else 0,
    }
    if op.done and op.error is not None:
        error: Json = {"code": op.error.code, "message": op.error.message}
        if op.error.quota_metric:
            error["errorDetails"] = [{"quotaInfo": {"metricName": op.error.quota_metric,
                                                    "limitName": op.error.quota_metric}}]
        out["error"] = {"errors": [error]}
        out["httpErrorStatusCode"] = op.error.http_status
    return out


# --- paging ------------------------------------------------------------------------------


def page(req: Request, items: list[Any]) -> tuple[list[Any], str]:
    """One page of items and the token of the next (opaque: an encoded offset)."""
    size = min(int(req.query.get("maxResults", MAX_PAGE)), MAX_PAGE)
    token = req.query.get("pageToken")
    start = int(base64.urlsafe_b64decode(token.encode()).decode()) if token else 0
    chunk = items[start: start + size]
    end = start + size
    return chunk, base64.urlsafe_b64encode(str(end).encode()).decode() if end < len(items) \
        else ""


def filtered(req: Request, items: list[tuple[str, Json]]) -> list[tuple[str, Json]]:
    """Items whose name, status and labels match the request's filter."""
    try:
        keep = filters.matcher(req.query.get("filter"))
    except ValueError as err:
        raise ApiError(400, "invalid", str(err)) from err
    return [(z, i) for z, i in items
            if keep({"name": i["name"], "status": str(i.get("status", ""))}, i.get("labels", {}))]


def listing(req: Request, kind: str, items: list[Json]) -> Json:
    chunk, token = page(req, [i for _, i in filtered(req, [("", i) for i in items])])
    out: Json = {"kind": kind, "items": chunk}
    if token:
        out["nextPageToken"] = token
    return out


def aggregated(req: Request, kind: str, key: str, items: list[tuple[str, Json]],
               render: Callable[[Json], Json] = lambda i: i) -> Json:
    """items keyed by 'zones/<zone>' per page; zones with nothing on this page carry the
    NO_RESULTS_ON_PAGE warning, unreachable ones the UNREACHABLE warning. ``items`` are
    (zone, fields to filter on); ``render`` turns the kept ones into resources."""
    c = req.compute
    visible = [(z, i) for z, i in filtered(req, items) if z not in c.unreachable]
    chunk, token = page(req, visible)
    scopes: Json = {}
    for zone in c.zones:
        held = [render(i) for z, i in chunk if z == zone]
        if zone in c.unreachable:
            scopes[f"zones/{zone}"] = {"warning": {"code": "UNREACHABLE",
                                                   "message": f"zone {zone} unreachable"}}
        elif held:
            scopes[f"zones/{zone}"] = {key: held}
        else:
            scopes[f"zones/{zone}"] = {"warning": {"code": "NO_RESULTS_ON_PAGE",
                                                   "message": "no results"}}
    out: Json = {"kind": kind, "items": scopes}
    if token:
        out["nextPageToken"] = token
    return out


# --- handlers ----------------------------------------------------------------------------


def list_instances(req: Request) -> Json:
    c, zone = req.compute, req.zone
    with c.lock:
        items = [render_instance(c, i) for i in sorted(c.live(zone), key=lambda i: i.name)]
    return listing(req, "compute#instanceList", items)


def aggregated_instances(req: Request) -> Json:
    """Filtered and paged on the records (the filtered order is kept between the pages
    of one listing while nothing changes); only the page is rendered."""
    c = req.compute
    with c.lock:
        key = (req.query.get("filter") or "", c.version, len(c.instances))
        if c.list_cache is None or c.list_cache[0] != key:
            records = sorted(c.live(), key=lambda i: (i.zone, i.name))
            items = [(i.zone, {"name": i.name, "status": i.status, "labels": i.labels,
                               "rec": i}) for i in records]
            c.list_cache = (key, filtered(req, items))
        kept = c.list_cache[1]
        req.query.pop("filter", None)  # applied above
        return aggregated(req, "compute#instanceAggregatedList", "instances", kept,
                          lambda i: render_instance(c, i["rec"]))


def get_instance(req: Request) -> Json:
    with req.compute.lock:
        return render_instance(req.compute, req.compute.instance(req.zone, req.params["name"]))


def delete_instance(req: Request) -> Json:
    op = req.compute.delete(req.zone, req.params["name"], req.query.get("requestId"))
    return render_operation(req.compute, op)


def stop_instance(req: Request) -> Json:
    return render_operation(req.compute, req.compute.stop(
        req.zone, req.params["name"], req.query.get("requestId")))


def suspend_instance(req: Request) -> Json:
    return render_operation(req.compute, req.compute.stop(
        req.zone, req.params["name"], req.query.get("requestId"), suspend=True))


def set_labels(req: Request) -> Json:
    op = req.compute.set_labels(req.zone, req.params["name"],
                                str(req.body.get("labelFingerprint", "")),
                                dict(req.body.get("labels", {})), req.query.get("requestId"))
    return render_operation(req.compute, op)


def bulk(req: Request) -> Json:
    op = bulk_insert(req.compute, req.zone, req.body, req.query.get("requestId"))
    return render_operation(req.compute, op)


def list_reservations(req: Request) -> Json:
    c, zone = req.compute, req.zone
    with c.lock:
        items = [render_reservation(c, r) for r in c.reservations.values()
                 if r.zone == zone and owned_by(req, r)]
    return listing(req, "compute#reservationList", items)


def aggregated_reservations(req: Request) -> Json:
    c = req.compute
    with c.lock:
        items = [(r.zone, render_reservation(c, r))
                 for r in sorted(c.reservations.values(), key=lambda r: (r.zone, r.name))
                 if owned_by(req, r)]
    return aggregated(req, "compute#reservationAggregatedList", "reservations", items)


def render_future_reservation(c: Compute, f: FutureReservationRec) -> Json:
    out: Json = {
        "kind": "compute#futureReservation", "name": f.name,
        "zone": zone_url(c, f.zone), "reservationMode": f.mode,
        "status": {"procurementStatus": "FULFILLED", "autoCreatedReservations": [
            f"{zone_url(c, f.zone)}/reservations/{name}" for name in f.reservations]},
    }
    if f.end_time is not None:
        out["timeWindow"] = {"endTime": f.end_time}
    return out


def aggregated_future_reservations(req: Request) -> Json:
    c = req.compute
    with c.lock:
        items = [(f.zone, render_future_reservation(c, f))
                 for f in sorted(c.future_reservations.values(), key=lambda f: (f.zone, f.name))
                 if req.params["project"] == c.project]
    return aggregated(req, "compute#futureReservationsAggregatedListResponse",
                      "futureReservations", items)


def get_reservation(req: Request) -> Json:
    c = req.compute
    with c.lock:
        r = c.reservations.get((req.zone, reservation_ref(req, req.params["name"])))
        if r is None:
            raise ApiError(404, "notFound", f"reservation {req.params['name']} not found")
        return render_reservation(c, r)


def get_template(req: Request) -> Json:
    c, name = req.compute, req.params["name"]
    if name not in c.templates:
        raise ApiError(404, "notFound", f"instance template {name} not found")
    return {"kind": "compute#instanceTemplate", "name": name,
            "selfLink": f"{API}/projects/{c.project}/global/instanceTemplates/{name}",
            "properties": c.template_properties.get(name, {})}


def render_machine_type(zone: str, mt: MachineType) -> Json:
    out: Json = {"kind": "compute#machineType", "name": mt.name, "zone": zone,
                 "guestCpus": mt.cpus, "memoryMb": mt.memory_mb, "architecture": mt.architecture}
    if mt.accelerators:
        out["accelerators"] = [{"guestAcceleratorType": t, "guestAcceleratorCount": n}
                               for t, n in mt.accelerators]
    return out


def get_machine_type(req: Request) -> Json:
    mt = req.compute.machine_types.get(req.params["name"])
    zone = req.zone
    if mt is None:
        raise ApiError(404, "notFound", f"machine type {req.params['name']} not found")
    return render_machine_type(zone, mt)


def list_machine_types(req: Request) -> Json:
    zone = req.zone
    items = [render_machine_type(zone, mt)
             for _, mt in sorted(req.compute.machine_types.items())]
    return listing(req, "compute#machineTypeList", items)


def poll_operation(req: Request) -> Json:
    return render_operation(req.compute, req.compute.poll(req.zone, req.params["op"]))


def wait_operation(req: Request) -> Json:
    return render_operation(req.compute, req.compute.poll(req.zone, req.params["op"],
                                                          wait=True))


def get_region(req: Request) -> Json:
    c = req.compute
    if req.params["region"] != c.region:
        raise ApiError(404, "notFound", f"region {req.params['region']} not found")
    quotas = [{"metric": m, "limit": float(limit), "usage": float(c.quota_usage(m))}
              for m, limit in sorted(c.quotas.items())]
    return {"kind": "compute#region", "name": c.region, "status": "UP", "quotas": quotas,
            "zones": [zone_url(c, z) for z in c.zones]}


_P = r"/compute/v1/projects/(?P<project>[^/]+)"
_Z = _P + r"/zones/(?P<zone>[^/]+)"
ROUTES: list[tuple[str, str, re.Pattern[str], Handler]] = [
    (m, name, re.compile(path + "$"), fn) for m, name, path, fn in [
        ("GET", "instances.list", _Z + "/instances", list_instances),
        ("GET", "instances.aggregatedList", _P + "/aggregated/instances", aggregated_instances),
        ("POST", "instances.bulkInsert", _Z + "/instances/bulkInsert", bulk),
        ("GET", "instances.get", _Z + "/instances/(?P<name>[^/]+)", get_instance),
        ("DELETE", "instances.delete", _Z + "/instances/(?P<name>[^/]+)", delete_instance),
        ("POST", "instances.setLabels", _Z + "/instances/(?P<name>[^/]+)/setLabels",
         set_labels),
        ("POST", "instances.stop", _Z + "/instances/(?P<name>[^/]+)/stop", stop_instance),
        ("POST", "instances.suspend", _Z + "/instances/(?P<name>[^/]+)/suspend",
         suspend_instance),
        ("GET", "reservations.list", _Z + "/reservations", list_reservations),
        ("GET", "reservations.aggregatedList", _P + "/aggregated/reservations",
         aggregated_reservations),
        ("GET", "reservations.get", _Z + "/reservations/(?P<name>[^/]+)", get_reservation),
        ("GET", "futureReservations.aggregatedList", _P + "/aggregated/futureReservations",
         aggregated_future_reservations),
        ("GET", "machineTypes.list", _Z + "/machineTypes", list_machine_types),
        ("GET", "machineTypes.get", _Z + "/machineTypes/(?P<name>[^/]+)", get_machine_type),
        ("GET", "zoneOperations.get", _Z + "/operations/(?P<op>[^/]+)", poll_operation),
        ("POST", "zoneOperations.wait", _Z + "/operations/(?P<op>[^/]+)/wait", wait_operation),
        ("GET", "regions.get", _P + "/regions/(?P<region>[^/]+)", get_region),
        ("GET", "instanceTemplates.get", _P + "/global/instanceTemplates/(?P<name>[^/]+)",
         get_template),
    ]
]


class _Handler(BaseHTTPRequestHandler):
    compute: Compute  # set on the per-server subclass

    def _serve(self) -> None:
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        for method, name, pattern, fn in ROUTES:
            match = pattern.match(url.path)
            if method != self.command or match is None:
                continue
            self.compute.calls[name] += 1
            if self.compute.before_call is not None:
                self.compute.before_call(name, match.groupdict())
            fault = self.compute.take_fault(name)
            try:
                # Another project answers only for the reservations it owns.
                project = match.group("project")
                if project != self.compute.project and not (
                        name.startswith("reservations.") and project in self.compute.projects()):
                    raise ApiError(404, "notFound", f"project {match.group('project')}")
                if fault is not None and not fault.drop:
                    raise ApiError(fault.status, fault.reason, "injected fault")
                if fault is not None and not fault.after:
                    self._drop()
                    return
                out = fn(Request(self.compute, match, query, json.loads(raw or b"{}")))
                mask = self.headers.get("X-Goog-FieldMask") or query.get("fields")
                if mask and not self.compute.field_masks:
                    raise ApiError(400, "invalid", "Invalid field selection")
                if mask:
                    try:
                        out = fields.select(out, fields.parse(mask))
                    except ValueError as err:
                        raise ApiError(400, "invalid", str(err)) from err
                if fault is not None:  # it happened, but the caller never hears so
                    self._drop()
                    return
                self._reply(200, out)
            except ApiError as err:
                self._reply(err.status, {"error": {
                    "code": err.status, "message": err.message,
                    "errors": [{"message": err.message, "domain": "global",
                                "reason": err.reason}]}})
            return
        self._reply(404, {"error": {"code": 404, "message": f"no route {self.path}",
                                    "errors": [{"reason": "notFound"}]}})

    do_GET = do_POST = do_DELETE = _serve

    def _reply(self, status: int, body: Json) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _drop(self) -> None:
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve(compute: Compute) -> Iterator[str]:
    """Serve ``compute`` on 127.0.0.1 (a free port) and yield its endpoint URL."""
    handler = type("Handler", (_Handler,), {"compute": compute})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), name="fake-gce",
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
