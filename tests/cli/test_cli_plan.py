"""`allset plan`: exit 0 with a plan, 2 when infeasible, 1 on bad input; JSON contract."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.controller.test_controller_bad_selectors import NESTED_ALL, UNDERESTIMATED
from tests.kit.paths import ROOT

EXAMPLE = ROOT / "deploy" / "examples" / "simulated.yaml"
GANG = ROOT / "deploy" / "examples" / "requests" / "mixed-gang.yaml"


def config(tmp_path: Path) -> Path:
    # The example without its statePath, so the test starts from an empty cloud.
    text = "\n".join(line for line in EXAMPLE.read_text().splitlines() if "statePath" not in line)
    path = tmp_path / "allset.yaml"
    path.write_text(text)
    return path


def allset_plan(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "provider.cli", "plan", *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


def test_plan_json_contract(tmp_path: Path) -> None:
    result = allset_plan("--config", str(config(tmp_path)), "--request", str(GANG),
                         "--output", "json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)  # nothing else on stdout
    assert body["feasible"] is True
    assert body["parts"] == [
        {"nodeGroup": "cpu-a", "source": "on-demand", "reservation": None, "count": 1,
         "podSets": {"ps": 2}, "reused": []},
        {"nodeGroup": "h100-a", "source": "reserved", "reservation": "cr-h100-a", "count": 2,
         "podSets": {"workers": 16}, "reused": []},
    ]
    assert body["cost"] == {"onDemandPerHour": 1.61}
    assert body["reasons"] == []


def test_plan_infeasible_exits_2_with_reasons(tmp_path: Path) -> None:
    request = tmp_path / "req.yaml"
    request.write_text(GANG.read_text().replace("count: 16", "count: 48")
                       .replace('"reserved,on-demand"', "reserved"))
    result = allset_plan("--config", str(config(tmp_path)), "--request", str(request),
                         "--output", "json")
    assert result.returncode == 2, result.stderr
    body = json.loads(result.stdout)
    assert body["feasible"] is False and body["parts"] == []
    codes = {(r["code"], r["podSet"]) for r in body["reasons"]}
    assert ("CapacityUnavailable", "workers") in codes
    text = allset_plan("--config", str(config(tmp_path)), "--request", str(request))
    assert text.returncode == 2 and "no plan" in text.stdout


def test_plan_bad_input_exits_1(tmp_path: Path) -> None:
    request = tmp_path / "req.yaml"
    request.write_text(GANG.read_text().replace("topology: zone", "topology: rack"))
    result = allset_plan("--config", str(config(tmp_path)), "--request", str(request))
    assert result.returncode == 1
    assert "spec.parameters.topology: 'rack' is not one of fabric, zone, none" in result.stderr
    missing = allset_plan("--config", str(config(tmp_path)), "--request", "nope.yaml")
    assert missing.returncode == 1
    assert "--request: nope.yaml: cannot read request: No such file" in missing.stderr
    bad_config = tmp_path / "bad.yaml"
    bad_config.write_text("cluster: x\ncloud: {provider: fake}\n")
    result = allset_plan("--config", str(bad_config), "--request", str(GANG))
    assert result.returncode == 1 and "nodeGroups: required key is missing" in result.stderr


def test_every_example_config_loads() -> None:
    from provider.config import load_config

    for path in sorted((ROOT / "deploy" / "examples").glob("*.yaml")):
        if path.name in ("aws.yaml", "gcp.yaml"):
            continue  # shapes come from the cloud; covered by the adapter tests
        assert load_config(path).groups


DRA = ROOT / "deploy" / "examples" / "requests" / "dra-80gi.yaml"


def test_plan_reads_dra_claims_and_explains_a_miss_by_group(tmp_path: Path) -> None:
    result = allset_plan("--config", str(config(tmp_path)), "--request", str(DRA),
                         "--output", "json")
    assert result.returncode == 0, result.stderr
    assert {p["nodeGroup"] for p in json.loads(result.stdout)["parts"]} == {"h100-a"}
    bigger = tmp_path / "dra-96gi.yaml"
    bigger.write_text(DRA.read_text().replace('quantity("80Gi")', 'quantity("96Gi")'))
    result = allset_plan("--config", str(config(tmp_path)), "--request", str(bigger))
    assert result.returncode == 2, result.stderr
    assert "h100-a, h100-b: claim gpus request gpus: no device matches (memory 80Gi ≥ 96Gi " \
           "is false)" in result.stdout
    assert "a100-b: claim gpus request gpus: no device matches (memory 40Gi ≥ 96Gi is " \
           "false)" in result.stdout



def test_plan_refuses_a_selector_beyond_the_limits_by_its_field(tmp_path: Path) -> None:
    """Issue 32: a selector nested 300 deep ended `allset plan` in a RecursionError."""
    deep = tmp_path / "dra-deep.yaml"
    deep.write_text(DRA.read_text().replace(
        'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0',
        "(" * 300 + "true" + ")" * 300))
    result = allset_plan("--config", str(config(tmp_path)), "--request", str(deep))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert ("PodTemplate trainer: ResourceClaimTemplate four-80gi: spec.devices.requests[0]"
            ".exactly.selectors[0].cel.expression: the selector nests brackets 300 deep"
            ) in result.stderr


def test_plan_says_what_the_controller_says_of_a_costly_selector(tmp_path: Path) -> None:
    """Issue 51: the 411-byte selector (refused by allset's cost estimate) and one within it
    that runs out of its evaluation steps: `allset plan` refuses each naming the limit, as
    the controller fails the request, in well under the minute the first took before."""
    memory = 'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0'
    costly = tmp_path / "dra-costly.yaml"
    costly.write_text(DRA.read_text().replace(memory, json.dumps(NESTED_ALL)))
    result = allset_plan("--config", str(config(tmp_path)), "--request", str(costly))
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    assert ".exactly.selectors[0].cel.expression: the selector has an estimated cost of " \
           in result.stderr
    assert "allset evaluates selectors of cost at most 2000" in result.stderr
    slow = tmp_path / "dra-slow.yaml"
    slow.write_text(DRA.read_text().replace(memory, json.dumps(UNDERESTIMATED)))
    result = allset_plan("--config", str(config(tmp_path)), "--request", str(slow))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "InvalidRequest" in result.stdout, result.stdout
    assert "took more than 12000 evaluation steps on device gpu-0" in result.stdout


WINDOW_CONFIG = """\
cluster: test
cloud:
  provider: fake
  fake:
    reservations:
      - {{id: cb-h100, zone: us-east-1b, instanceType: p5.48xlarge, count: 2,
         kind: capacity-block, targeted: true, startsAt: {opens}, endsAt: {ends}}}
runtimes:
  waitValuePerGpuHour: 500
  queues: {{research/batch: 1}}
nodeGroups:
  - {{id: h100, zone: us-east-1b, instanceType: p5.48xlarge, cpu: 191, memory: 1900Gi,
     gpu: {{type: nvidia-h100-80gb, count: 8}}, maxSize: 4, reservations: [cb-h100],
     price: {{onDemand: 98.32}}, bootTime: 5m}}
"""


def test_plan_shows_the_value_of_waiting_of_the_queue_given(tmp_path: Path) -> None:
    """Issue 19: `allset plan --queue ns/name` values the wait as the request's Kueue queue
    would, and says which value it used and where it came from. A block opens in 30 min:
    16 GPUs x 0.5 h x 1 USD (queue research/batch) is worth waiting for against about
    1,180 USD bought now; at the default 500 USD it is not."""
    import datetime as dt

    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    path = tmp_path / "allset.yaml"
    path.write_text(WINDOW_CONFIG.format(opens=(now + dt.timedelta(minutes=30)).isoformat(),
                                         ends=(now + dt.timedelta(hours=12)).isoformat()))
    request = tmp_path / "req.yaml"
    request.write_text(GANG.read_text().replace(
        'capacityTypes: "reserved,on-demand"',
        'expectedRuntimeSeconds: "21600", maxWaitSeconds: "7200"').replace(
        "    - podTemplateRef: {name: ps}\n      count: 2\n", ""))
    batch = allset_plan("--config", str(path), "--request", str(request),
                        "--queue", "research/batch")
    assert batch.returncode == 0, batch.stderr
    assert "decision: waiting for cb-h100 opening at" in batch.stdout
    assert "valued at 1.00 USD/GPU-h from queue research/batch)" in batch.stdout
    other = allset_plan("--config", str(path), "--request", str(request), "--queue",
                        "research/urgent", "--output", "json")
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout)["timing"] == {
        "decision": "buy-now", "waitValuePerGpuHourUsd": 500.0,
        "waitValueFrom": "runtimes.waitValuePerGpuHour"}
    bad = allset_plan("--config", str(path), "--request", str(request), "--queue", "batch")
    assert bad.returncode == 1
    assert "--queue: queue 'batch' is not namespace/localQueueName" in bad.stderr


def test_plan_weighs_running_away_from_the_data_by_queue() -> None:
    """Issue 34: the example gang's data is in us-east-1a, a free reservation in us-east-1b;
    with no cost stated it takes the reservation, through queue research/etl (15 USD per
    GPU-hour away) it buys on-demand next to the data, and says why each time."""
    two_zones = ROOT / "deploy" / "examples" / "two-zones.yaml"
    near_data = ROOT / "deploy" / "examples" / "requests" / "near-data.yaml"
    away = allset_plan("--config", str(two_zones), "--request", str(near_data),
                       "--output", "json")
    assert away.returncode == 0, away.stderr
    body = json.loads(away.stdout)
    assert {p["nodeGroup"] for p in body["parts"]} == {"cpu-b", "h100-b"}
    assert body["placement"]["dataZone"] == "us-east-1a"
    assert body["placement"]["awayGpus"] == 32
    near = allset_plan("--config", str(two_zones), "--request", str(near_data),
                       "--queue", "research/etl")
    assert near.returncode == 0, near.stderr
    assert "h100-a" in near.stdout and "h100-b" not in near.stdout
    assert "placement: runs next to its data in us-east-1a: on-demand here at 394.89 USD/h is " \
           "below the 481.61 USD/h of us-east-1b" in near.stdout
    assert "from queue research/etl" in near.stdout


def test_a_key_left_out_is_called_missing_never_none(tmp_path: Path) -> None:
    """Issue 35, item 9: a request without its class or a pod set's count printed
    `None: allset plans only ...` and `None must be an integer`."""
    request = tmp_path / "req.yaml"
    request.write_text(GANG.read_text()
                       .replace("apiVersion: autoscaling.x-k8s.io/v1\n", "", 1)
                       .replace("  provisioningClassName: atomic-reserved.allset.dev\n", "")
                       .replace("parameters: {topology: zone,", "parameters: {topology: null,")
                       .replace("      count: 2\n", ""))
    result = allset_plan("--config", str(config(tmp_path)), "--request", str(request))
    assert result.returncode == 1
    assert "None" not in result.stderr, result.stderr
    lines = [line.strip() for line in result.stderr.splitlines()[1:]]
    assert lines == [
        "apiVersion: missing: autoscaling.x-k8s.io/v1 or /v1beta1",
        "spec.provisioningClassName: missing: allset plans only atomic-reserved.allset.dev",
        "spec.parameters.topology: no value: give one, or leave the parameter out",
        "spec.podSets[0].count: missing: an integer from 1 to 2147483647 (the API's int32)",
    ], result.stderr


def test_one_node_is_singular_and_amounts_are_in_usd(tmp_path: Path) -> None:
    """Issue 35, item 9: `1 nodes, on-demand spend 1.61/h` and `on-demand at 1.61/h`."""
    request = tmp_path / "req.yaml"
    text = GANG.read_text()
    request.write_text(text.replace("    - podTemplateRef: {name: workers}\n      count: 16\n",
                                    ""))
    result = allset_plan("--config", str(config(tmp_path)), "--request", str(request))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "research/llm-pretrain: 1 node, on-demand spend 1.61 USD/h"
    assert lines[2].split()[-4:] == ["on-demand", "at", "1.61", "USD/h"], lines
