"""Terminate, commit and the deletion mark: one call per instance (GCE has no bulk delete
or bulk setLabels).

Each runs in two phases: every call is sent first, concurrently, then every operation is
waited on. The operations run side by side in GCE, so rolling back a 64-node gang takes
about as long as deleting one node, not 64 deletes in a row."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from google.api_core import exceptions as gexc
from google.cloud import compute_v1

from adapters.gcp import labels
from adapters.gcp.calls import Operations
from adapters.gcp.discovery import split_id
from adapters.gcp.errors import (
    CONDITION,
    GONE,
    TRANSPORT_ERRORS,
    classify,
    from_api_error,
    from_transport,
    operation_failure,
)
from provider.domain.cloud import CloudError, InsufficientCapacity, InvalidRequest, TransientError

log = logging.getLogger(__name__)
R = TypeVar("R")

SET_LABELS_TRIES = 4
Started = tuple[str, compute_v1.Operation]  # (zone, operation)


class Changes:
    def __init__(self, instances: compute_v1.InstancesClient, ops: Operations, project: str,
                 *, request_timeout: float, workers: int) -> None:
        self._instances = instances
        self._ops = ops
        self._project = project
        self._timeout = request_timeout
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gcp")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    # --- terminate -----------------------------------------------------------------------

    def terminate(self, instance_ids: Sequence[str]) -> None:
        """Idempotent: an instance already gone (404, RESOURCE_NOT_FOUND) is done."""
        started, errors = self._map(instance_ids, self._start_delete)
        for iid, begun in started.items():
            if begun is None:
                continue
            try:
                done = self._ops.wait(*begun, f"delete {iid}")
            except CloudError as err:
                errors.append(err)
                continue
            failure = operation_failure(done)
            if failure is not None and not set(failure.codes) & GONE:
                errors.append(classify(failure))
        _raise_first(errors, len(instance_ids), "delete")

    def _start_delete(self, iid: str) -> Started | None:
        zone, name = _locate(iid)
        try:
            op = self._instances.delete_unary(project=self._project, zone=zone, instance=name,
                                              retry=None, timeout=self._timeout)
        except gexc.GoogleAPICallError as err:
            if err.code == 404:
                return None  # already gone: done
            raise from_api_error(err) from err
        except TRANSPORT_ERRORS as err:
            # Deleting again is harmless, so for the caller this is a plain retry.
            raise from_transport(err, mutating=False, what=f"delete {iid}") from err
        return zone, op

    # --- commit and the deletion mark ----------------------------------------------------

    def commit(self, instance_ids: Sequence[str], attempt: str) -> None:
        """Add ``allset-committed=true`` to each instance of the attempt, with the label
        fingerprint just read, so no one else's label change is overwritten. Idempotent."""

        def change(iid: str, inst: compute_v1.Instance) -> dict[str, str] | None:
            tags = labels.from_labels(inst.labels)
            if tags is None or tags.attempt != attempt:
                raise InvalidRequest(f"{iid} does not belong to attempt {attempt}",
                                     cloud_code="invalid")
            return None if tags.committed else labels.committed(dict(inst.labels))

        def gone(iid: str, err: gexc.GoogleAPICallError) -> None:
            # A node of the gang vanished before its commit (a preempted spot VM): the
            # gang is not whole, so the commit fails and the attempt rolls back.
            raise InsufficientCapacity(f"{iid} is gone before its commit",
                                       cloud_code="notFound") from err

        self._relabel(instance_ids, change, gone)

    def move_reservation(self, moves: Mapping[str, str]) -> None:
        """Say on each VM the reservation it landed in (instance id -> reservation id),
        with the fingerprint just read. Idempotent."""

        def change(iid: str, inst: compute_v1.Instance) -> dict[str, str] | None:
            tags = labels.from_labels(inst.labels)
            if tags is not None and tags.reservation == moves[iid]:
                return None
            return labels.moved_to(dict(inst.labels), moves[iid])

        self._relabel(list(moves), change, lambda iid, err: None)

    def mark_deleting(self, instance_ids: Sequence[str], at: float) -> None:
        """Add ``allset-deleting=<epoch seconds>`` to each instance, with the fingerprint
        just read (a stale one is refused with 412 conditionNotMet: read again). An
        instance marked already keeps its first mark; one already gone is done."""

        def change(iid: str, inst: compute_v1.Instance) -> dict[str, str] | None:
            if labels.DELETING in inst.labels:
                return None
            return labels.deleting(dict(inst.labels), at)

        self._relabel(instance_ids, change, lambda iid, err: None)

    def _relabel(self, instance_ids: Sequence[str],
                 change: Callable[[str, compute_v1.Instance], dict[str, str] | None],
                 gone: Callable[[str, gexc.GoogleAPICallError], None]) -> None:
        """setLabels on every instance, each with the labels ``change`` makes of the ones
        just read (None: nothing to do); ``gone`` says what a 404 on the read means."""
        pending = list(dict.fromkeys(instance_ids))
        errors: list[CloudError] = []
        for _ in range(SET_LABELS_TRIES):
            started, failed = self._map(pending, lambda iid: self._start_relabel(
                iid, change, gone))
            errors.extend(failed)
            pending = []
            for iid, begun in started.items():
                if begun is None:
                    continue
                try:
                    done = self._ops.wait(*begun, f"setLabels {iid}")
                except CloudError as err:
                    errors.append(err)
                    continue
                failure = operation_failure(done)
                if failure is not None and set(failure.codes) & CONDITION:
                    pending.append(iid)  # the labels changed under us: read them again
                elif failure is not None:
                    errors.append(classify(failure))
            if not pending:
                break
        if pending:
            errors.append(TransientError(f"setLabels of {len(pending)} instances: labels kept "
                                         "changing under us", cloud_code="CONDITION_NOT_MET"))
        _raise_first(errors, len(instance_ids), "setLabels")

    def _start_relabel(self, iid: str,
                       change: Callable[[str, compute_v1.Instance], dict[str, str] | None],
                       gone: Callable[[str, gexc.GoogleAPICallError], None]) -> Started | None:
        zone, name = _locate(iid)
        what = f"setLabels {iid}"
        for _ in range(SET_LABELS_TRIES):
            try:
                inst = self._instances.get(project=self._project, zone=zone, instance=name,
                                           retry=None, timeout=self._timeout)
            except gexc.GoogleAPICallError as err:
                if err.code == 404:
                    gone(iid, err)
                    return None
                raise from_api_error(err) from err
            except TRANSPORT_ERRORS as err:
                raise from_transport(err, mutating=False, what=what) from err
            new = change(iid, inst)
            if new is None:
                return None
            # The fingerprint of the labels just read: GCE refuses the write with 412
            # conditionNotMet if anyone changed them since, and nothing is overwritten.
            body = compute_v1.InstancesSetLabelsRequest(
                label_fingerprint=inst.label_fingerprint, labels=new)
            try:
                op = self._instances.set_labels_unary(
                    project=self._project, zone=zone, instance=name,
                    instances_set_labels_request_resource=body,
                    retry=None, timeout=self._timeout)
            except gexc.GoogleAPICallError as err:
                if err.code == 412:
                    continue  # a stale fingerprint: read the labels again
                if err.code == 404:
                    gone(iid, err)
                    return None
                raise from_api_error(err) from err
            except TRANSPORT_ERRORS as err:
                # Setting the same labels twice is harmless: a plain retry.
                raise from_transport(err, mutating=False, what=what) from err
            return zone, op
        raise TransientError(f"{what}: labels kept changing under us", cloud_code="412")

    # --- fan-out -------------------------------------------------------------------------

    def _map(self, ids: Sequence[str], fn: Callable[[str], R]
             ) -> tuple[dict[str, R], list[CloudError]]:
        """fn over every id concurrently: what each returned, and every typed error."""
        unique = list(dict.fromkeys(ids))
        futures = {iid: self._pool.submit(fn, iid) for iid in unique}
        results: dict[str, R] = {}
        errors: list[CloudError] = []
        for iid, future in futures.items():
            try:
                results[iid] = future.result()
            except CloudError as err:
                errors.append(err)
        return results, errors


def _raise_first(errors: list[CloudError], total: int, what: str) -> None:
    """Every instance was tried; the first error stands for the rest (the caller retries
    the whole list, which is idempotent)."""
    if not errors:
        return
    if len(errors) > 1:
        log.warning("%s: %d of %d instances failed; first: %s", what, len(errors), total,
                    errors[0])
    raise errors[0]


def _locate(iid: str) -> tuple[str, str]:
    try:
        return split_id(iid)
    except ValueError as err:
        raise InvalidRequest(str(err), cloud_code="invalid") from err
