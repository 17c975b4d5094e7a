"""When `allset restart-on-renewal` restarts Cluster Autoscaler (issue 53, item 7): only
when a pod of CA's Deployment runs a container that started before the certificate in the
Secret was issued, once per renewal. tests/e2e/test_restart_on_renewal.py runs it against
a real API server, as its ServiceAccount, with deploy's rights and no more."""

from __future__ import annotations

from typing import Any

from provider.controller.restart_on_renewal import (
    PROPAGATION_SECONDS,
    RESTARTED_FOR,
    decide,
)

ISSUED = "2026-12-01T10:00:00Z"


def certificate(issued: str | None = ISSUED) -> dict[str, Any]:
    return {"status": {"notBefore": issued} if issued else {}}


def deployment(stamp: str | None = None) -> dict[str, Any]:
    notes = {RESTARTED_FOR: stamp} if stamp else {}
    return {"spec": {"selector": {"matchLabels": {"app": "ca"}},
                     "template": {"metadata": {"annotations": notes}}}}


def pod(name: str, *started: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T11:00:00Z"
    return {"metadata": meta, "status": {"containerStatuses": [
        {"state": {"running": {"startedAt": s}}} for s in started]}}


def test_a_pod_started_before_the_renewal_is_restarted_for_it() -> None:
    verdict = decide(certificate(), deployment(), [pod("ca-1", "2026-11-01T00:00:00Z")])
    assert verdict.restart and verdict.issued == ISSUED
    assert "ca-1" in verdict.why and ISSUED in verdict.why


def test_once_per_renewal() -> None:
    """The stamp is on the template while the rollout replaces the pods: no second one."""
    verdict = decide(certificate(), deployment(ISSUED), [pod("ca-1", "2026-11-01T00:00:00Z")])
    assert not verdict.restart and "already" in verdict.why
    # The next renewal is another.
    later = decide(certificate("2027-02-01T10:00:00Z"), deployment(ISSUED),
                   [pod("ca-2", "2026-12-01T10:05:00Z")])
    assert later.restart


def test_pods_started_after_the_renewal_are_left() -> None:
    verdict = decide(certificate(), deployment(), [pod("ca-1", "2026-12-01T10:05:00Z")])
    assert not verdict.restart and "after" in verdict.why


def test_a_container_started_while_the_kubelet_may_still_project_the_old_files_is_restarted(
        ) -> None:
    assert PROPAGATION_SECONDS > 60
    assert decide(certificate(), deployment(), [pod("ca-1", "2026-12-01T10:01:00Z")]).restart


def test_any_old_container_counts_and_a_pod_going_away_does_not() -> None:
    assert decide(certificate(), deployment(),
                  [pod("ca-1", "2026-12-01T11:00:00Z", "2026-11-01T00:00:00Z")]).restart
    assert not decide(certificate(), deployment(),
                      [pod("ca-1", "2026-11-01T00:00:00Z", deleting=True),
                       pod("ca-2", "2026-12-01T11:00:00Z")]).restart


def test_nothing_to_do_without_a_running_pod_or_an_issued_certificate() -> None:
    assert not decide(certificate(), deployment(), []).restart
    assert not decide(certificate(), deployment(), [{"metadata": {"name": "p"},
                                                     "status": {}}]).restart
    verdict = decide(certificate(None), deployment(), [pod("ca-1", "2026-11-01T00:00:00Z")])
    assert not verdict.restart and "not been issued" in verdict.why
