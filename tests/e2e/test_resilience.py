"""allset and the API server fail under a request: allset SIGKILLed in the middle of an
attempt and restarted; the API server restarted while etcd is compacted past allset's
watch. Each time the request converges and nothing is leaked or launched twice."""

from __future__ import annotations

import signal

from tests.e2e import direct, kueue
from tests.e2e.conftest import World
from tests.e2e.look import admitted, live, of_group, workload_of
from tests.e2e.rest import wait_for
from tests.e2e.test_kueue_path import _placed_on_booked_nodes, _provisioned


def test_allset_killed_mid_attempt_then_restarted(world: World) -> None:
    rest = world.cluster.rest
    allset = world.allset
    allset.stop()
    # Two parts (the one reserved H100 of r-crash, then one on demand): die after the first.
    allset.start(failpoints="executor.part-launched=kill@1")
    spec = kueue.pod_spec({"allset.dev/node-group": "crash"}, {"nvidia.com/gpu": "8"})
    rest.create(kueue.job("crash", 2, spec))
    try:
        assert allset.proc is not None and allset.proc.popen is not None
        popen = allset.proc.popen
        wait_for("allset to die at the failpoint", lambda: popen.poll() is not None, 90,
                 explain=world.logs)
        assert popen.returncode == -signal.SIGKILL, allset.log()
        half = live(of_group(world.kubelet.instances(), "crash"))
        # The crash left an uncommitted gang: the first part, or both (parts launch side
        # by side, so the second may be up before the first one's failpoint kills).
        assert half and not any(i.tags.committed for i in half), half

        allset.start()
        _, request = _provisioned(world, "crash")
        wait_for("Kueue to admit crash", lambda: admitted(workload_of(rest, "crash")), 60,
                 explain=world.logs)
        placed = _placed_on_booked_nodes(world, "crash", request, 2)
        everything = live(of_group(world.kubelet.instances(), "crash"))
        assert {i.id for i in everything} == {p["spec"]["nodeName"] for p in placed}
        assert len({i.tags.attempt for i in everything}) == 1  # one attempt's gang, whole
    finally:
        rest.delete("batch/v1", "Job", "crash", "default")
        if not allset.proc or not allset.proc.alive:
            allset.start()


def test_apiserver_restart_and_compaction_past_the_watch(world: World) -> None:
    """While the API server is down, etcd moves on and is compacted: the resourceVersion
    allset's watch resumes from is gone, the new server answers 410, allset lists again."""
    rest = world.cluster.rest
    before = direct.create(rest, "before-restart", "v1")
    try:
        direct.wait_provisioned(rest, "before-restart", "v1", world.logs)
        world.cluster.restart_apiserver(between=world.cluster.etcd_churn_and_compact)
        direct.create(rest, "after-restart", "v1")
        direct.wait_provisioned(rest, "after-restart", "v1", world.logs)
        assert "410" in allset_log_since_start(world), allset_log_since_start(world)[-3000:]
        assert before["metadata"]["uid"] == rest.get(
            "autoscaling.x-k8s.io/v1", "ProvisioningRequest", "before-restart",
            "default")["metadata"]["uid"]
    finally:
        direct.delete(rest, "before-restart")
        direct.delete(rest, "after-restart")


def allset_log_since_start(world: World) -> str:
    """All that the running allset logged (not a tail: after an API server restart the
    403s of its RBAC warm-up, one warning per watch and per gang pass, can push the 410
    out of any fixed number of lines)."""
    text = (world.allset.dir / "allset.log").read_text(errors="replace")
    return text[text.rfind("=== start"):]
