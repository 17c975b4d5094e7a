"""`allset instances`: what the cloud has for this cluster, and what reconcile would
roll back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from adapters.fake.store import FakeStore
from provider.domain.cloud import CapacityType, CloudInstance, InstanceState, OwnerTags
from tests.kit.paths import ROOT

CONFIG = """\
cluster: c1
cloud: {{provider: fake, fake: {{statePath: {state}}}}}
nodeGroups:
  - {{id: gpu, zone: z1, instanceType: p5, cpu: 96, memory: 1Ti, maxSize: 4}}
"""


def instance(name: str, attempt: str, committed: bool, cluster: str = "c1",
             deleting_since: float | None = None) -> CloudInstance:
    return CloudInstance(name, f"fake://z1/{name}", name, "z1", "p5", InstanceState.RUNNING,
                         OwnerTags(cluster, "gpu", attempt, "0.0", CapacityType.ON_DEMAND,
                                   committed=committed, deleting_since=deleting_since))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provider.cli", "instances", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


def test_instances_and_orphans(tmp_path: Path) -> None:
    state = tmp_path / "cloud.db"
    store = FakeStore(state)
    store.save([
        instance("ok-1", "a-done", committed=True),
        instance("half-1", "a-half", committed=True),  # a commit a crash interrupted
        instance("half-2", "a-half", committed=False),
        instance("lost-1", "a-lost", committed=False),
        instance("other", "a-x", committed=True, cluster="c2"),
    ])
    store.close()
    config = tmp_path / "allset.yaml"
    config.write_text(CONFIG.format(state=state))

    result = run("--config", str(config), "--output", "json")
    assert result.returncode == 0, result.stderr
    rows = {r["id"]: r for r in json.loads(result.stdout)}
    assert set(rows) == {"ok-1", "half-1", "half-2", "lost-1"}  # not the other cluster's
    assert rows["half-2"]["committed"] is True  # reconcile completes that commit
    assert rows["lost-1"]["committed"] is False
    assert rows["ok-1"]["providerID"] == "fake://z1/ok-1"

    orphans = run("--config", str(config), "--orphans", "--output", "json")
    assert [r["id"] for r in json.loads(orphans.stdout)] == ["lost-1"]
    text = run("--config", str(config), "--orphans")
    assert "lost-1" in text.stdout and "a-lost" in text.stdout and "ok-1" not in text.stdout


def test_instances_show_the_terminations_owed(tmp_path: Path) -> None:
    """A deletion mark (a termination a leader owes, or owed before it died) shows with
    its time; a marked instance of an attempt that never committed is an orphan too."""
    state = tmp_path / "cloud.db"
    store = FakeStore(state)
    store.save([
        instance("ok-1", "a-done", committed=True),
        instance("going-1", "a-done", committed=True, deleting_since=1_800_000_123.0),
        instance("undo-1", "a-lost", committed=False, deleting_since=1_800_000_200.0),
    ])
    store.close()
    config = tmp_path / "allset.yaml"
    config.write_text(CONFIG.format(state=state))

    rows = {r["id"]: r for r in json.loads(run("--config", str(config), "--output",
                                                "json").stdout)}
    assert rows["going-1"]["deleting"] == "2027-01-15T08:02:03Z"
    assert rows["going-1"]["committed"] is True and rows["going-1"]["orphan"] is None
    assert rows["undo-1"]["deleting"] == "2027-01-15T08:03:20Z"
    assert rows["undo-1"]["orphan"] == "uncommitted"
    assert rows["ok-1"]["deleting"] is None
    lines = run("--config", str(config)).stdout.splitlines()
    assert lines[0].split() == ["INSTANCE", "GROUP", "ATTEMPT", "PART", "SOURCE",
                                "RESERVATION", "STATE", "COMMITTED", "DELETING", "ORPHAN"]
    going = next(line.split() for line in lines if line.startswith("going-1"))
    assert going[-3:] == ["yes", "2027-01-15T08:02:03Z", "-"]
    ok = next(line.split() for line in lines if line.startswith("ok-1"))
    assert ok[-2:] == ["-", "-"]
    orphans = run("--config", str(config), "--orphans", "--output", "json")
    assert [r["id"] for r in json.loads(orphans.stdout)] == ["undo-1"]


def test_instances_beside_a_running_demo_ask_it_or_say_they_cannot(tmp_path: Path) -> None:
    """Issue 35, item 4: beside a running demo, a bare `allset instances` lists a simulated
    cloud of its own (empty) and says so; `--server` asks the running allset, whose cloud
    holds what CA scaled up."""
    from tests.kit.cli import Served, one_line
    from tests.kit.helpers import wait_until

    served = Served([], tmp_path / "serve.log")  # the built-in demo on the simulated cloud
    try:
        wait_until(served.answers, 30)
        group = served.scale_up(2)

        own = run()
        assert own.returncode == 0 and "(no instances)" in own.stdout, own.stdout
        assert "simulated cloud of this command alone" in one_line(own.stderr)
        assert "--server" in own.stderr

        def launched() -> list[dict[str, object]]:
            out = run("--server", served.address, "--output", "json")
            assert out.returncode == 0, out.stderr
            assert out.stderr == ""  # no private-cloud notice: this is the server's cloud
            return list(json.loads(out.stdout))

        wait_until(lambda: len(launched()) == 2 and all(r["committed"] for r in launched()),
                   30)
        assert {r["nodeGroup"] for r in launched()} == {group}
        text = run("--server", served.address)
        ids = {str(r["id"]) for r in launched()}
        assert text.returncode == 0 and all(i in text.stdout for i in ids), text.stdout
        orphans = run("--server", served.address, "--orphans")
        assert orphans.returncode == 0 and "(no orphans)" in orphans.stdout, orphans.stdout

        both = run("--server", served.address, "--config", str(tmp_path / "x.yaml"))
        assert both.returncode == 1 and "one of them" in one_line(both.stderr)
        nowhere = run("--server", "127.0.0.1:1")
        assert nowhere.returncode == 1 and "127.0.0.1:1" in one_line(nowhere.stderr)
    finally:
        served.stop()


def test_a_bad_instances_request_is_refused_and_named(tmp_path: Path) -> None:
    """The admin Instances method, asked with something that is not its request."""
    import grpc

    from provider.service.admin import INSTANCES_METHOD
    from tests.kit.cli import Served
    from tests.kit.helpers import wait_until

    served = Served([], tmp_path / "serve.log")
    try:
        wait_until(served.answers, 30)
        with grpc.insecure_channel(served.address) as channel:
            call = channel.unary_unary(INSTANCES_METHOD)
            for body, why in ((b"{not json", "not an instances request"),
                              (b'{"orphans": "yes"}', '{"orphans": true|false}')):
                try:
                    call(body, timeout=10)
                    raise AssertionError(f"{body!r} was answered")
                except grpc.RpcError as err:
                    assert err.code() is grpc.StatusCode.INVALID_ARGUMENT, err
                    assert why in (err.details() or ""), err.details()
            assert json.loads(call(b'{"orphans": true}', timeout=10)) == []
    finally:
        served.stop()
