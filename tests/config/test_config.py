"""Config: valid files become domain types; every mistake names file, field and fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from provider.config import ConfigError, load_config, load_config_text
from provider.domain.cloud import CapacityType
from provider.domain.model import GPU_RESOURCE, ScaleUpMode
from tests.kit.helpers import BASE_CONFIG, config

FAKE = "cloud: {provider: fake}\n"
MINIMAL = """\
cluster: c1
cloud: {provider: fake}
nodeGroups:
  - {id: g, zone: us-central1-a, instanceType: a3-highgpu-8g, cpu: 208, memory: 1800Gi,
     maxSize: 4, gpu: {type: nvidia-h100-80gb, count: 8}}
"""


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load_config_text(text, "cfg.yaml")
    assert str(info.value).startswith("cfg.yaml: ")
    return info.value.problems


def test_base_config_translates_to_domain() -> None:
    cfg = config(BASE_CONFIG)
    gpu, gpu_b, cpu = cfg.groups
    assert gpu.allocatable.get("cpu") == 191_000
    assert gpu.allocatable.get("memory") == 1900 * 2**30 * 1000
    assert gpu.allocatable.get(GPU_RESOURCE) == 8_000
    assert gpu.allocatable.get("pods") == 110_000
    assert gpu.scale_up is ScaleUpMode.ATOMIC and cpu.scale_up is ScaleUpMode.PARTIAL
    assert gpu.options.scale_down_unneeded_seconds == 1200
    assert gpu.options.max_node_provision_seconds is None
    assert gpu.capacity_types == (CapacityType.RESERVED, CapacityType.ON_DEMAND)
    assert gpu.region == "us-east-1" and gpu_b.min_size == 1
    assert cfg.refresh_interval_seconds == 30 and cfg.unavailable_ttl_seconds == 180


def test_minimal_config_runs_on_the_simulated_cloud() -> None:
    cfg = load_config_text(MINIMAL)
    assert cfg.schema.cloud.provider == "fake"
    assert cfg.groups[0].region == "us-central1"


def test_the_cloud_is_never_chosen_by_omission() -> None:
    """A config without `cloud:` used to run on the simulated cloud, quietly (issue 15,
    item 7): a production config missing its cloud must not pretend to launch nodes."""
    hint = ("set cloud.provider to aws or gcp, or to fake for the simulated cloud (nothing "
            "real is launched)")
    assert problems(MINIMAL.replace(FAKE, "")) == [("", f"cloud: required key is missing; "
                                                        f"{hint}")]
    assert problems(MINIMAL.replace(FAKE, "cloud: {}\n")) == [(
        "cloud", "provider: required key is missing; set it to aws or gcp, or to fake for "
        "the simulated cloud (nothing real is launched)")]
    # One section says which cloud as well as provider would.
    with_section = MINIMAL.replace(FAKE, "cloud: {fake: {launchLatencySeconds: 1}}\n")
    assert load_config_text(with_section).schema.cloud.provider == "fake"


@pytest.mark.parametrize(
    ("patch", "field", "words"),
    [
        ("cluster: Not_A_Label", "cluster", "is not a DNS label"),
        ("colour: blue", "colour", "unknown key; allowed keys: attempts, cloud, cluster"),
        ("cloud: {provider: azure}", "cloud.provider", "'fake', 'aws' or 'gcp'"),
        ("refreshInterval: soon", "refreshInterval", "not a duration"),
        ("runtimes: {margin: 0.8}", "runtimes.margin", "greater than or equal to 1"),
        ("runtimes: {undeclared: a day}", "runtimes.undeclared", "not a duration"),
        ("runtimes: {waitValuePerGpuHour: -2}", "runtimes.waitValuePerGpuHour",
         "greater than or equal to 0"),
        ("runtimes: {waitValuePerGpuHour: .inf}", "runtimes.waitValuePerGpuHour", "finite"),
        ("runtimes: {queues: {ml/train: -1}}", "runtimes.queues.ml/train",
         "greater than or equal to 0"),
        ("runtimes: {queues: {train: 4}}", "runtimes.queues.train",
         "queue 'train' is not namespace/localQueueName"),
        ("runtimes: {queues: {ml/: 4}}", "runtimes.queues.ml/", "queue 'ml/' is not"),
        ("runtimes: {queues: {/train: 4}}", "runtimes.queues./train", "queue '/train' is not"),
        ("runtimes: {queues: {ML/Train: 4}}", "runtimes.queues.ML/Train", "'ML/Train' is not"),
        ("runtimes: {queues: {ml/train/x: 4}}", "runtimes.queues.ml/train/x",
         "'ml/train/x' is not"),
        ("locality: {crossZoneCostPerGpuHour: -1}", "locality.crossZoneCostPerGpuHour",
         "greater than or equal to 0"),
        ("locality: {queues: {train: 2}}", "locality.queues.train",
         "queue 'train' is not namespace/localQueueName"),
        ("locality: {queues: {ml/train: .nan}}", "locality.queues.ml/train", "finite"),
    ],
)
def test_top_level_errors(patch: str, field: str, words: str) -> None:
    key = patch.split(":", 1)[0]  # the patch replaces that key's line (keys are unique)
    base = "".join(line for line in MINIMAL.splitlines(keepends=True)
                   if not line.startswith(f"{key}:"))
    got = problems(base + patch + "\n")
    assert any(f == field and words in m for f, m in got), got


def test_the_cost_of_running_away_from_data_is_set_by_queue_and_by_default() -> None:
    """Issue 34: locality.queues and locality.crossZoneCostPerGpuHour reach the demand below
    the request's own crossZoneCostPerGpuHour."""
    from provider.domain.demand import Demand

    cfg = load_config_text(MINIMAL + "locality:\n  crossZoneCostPerGpuHour: 1.5\n"
                           "  queues: {ml/train: 3, ml/etl: 0}\n")
    bare = Demand("ns/r", (), data_zone="z-a")
    on_train = cfg.guarded(bare, queue="ml/train")
    assert (on_train.cross_zone_cost_per_gpu_hour, on_train.cross_zone_cost_from) == \
        (3.0, "queue ml/train")
    assert cfg.guarded(bare, queue="ml/etl").cross_zone_cost_per_gpu_hour == 0.0
    other = cfg.guarded(bare, queue="ml/other")
    assert (other.cross_zone_cost_per_gpu_hour, other.cross_zone_cost_from) == \
        (1.5, "locality.crossZoneCostPerGpuHour")
    own = cfg.guarded(Demand("ns/r", (), data_zone="z-a", cross_zone_cost_per_gpu_hour=7.0),
                      queue="ml/train")
    assert (own.cross_zone_cost_per_gpu_hour, own.cross_zone_cost_from) == (7.0, "the request")
    assert load_config_text(MINIMAL).guarded(bare, queue="ml/train") \
        .cross_zone_cost_per_gpu_hour is None


def test_the_value_of_waiting_is_set_by_queue_and_by_default() -> None:
    """Issue 19: runtimes.queues and runtimes.waitValuePerGpuHour reach the demand below
    the request's own value (the precedence is tested in tests/planner/test_timing.py)."""
    from provider.domain.demand import Demand

    cfg = load_config_text(MINIMAL + "runtimes:\n  waitValuePerGpuHour: 2.5\n"
                           "  queues: {ml/train: 4, ml/serve.v2: 0}\n")
    bare = Demand("ns/r", ())
    assert cfg.schema.runtimes.queues == {"ml/train": 4.0, "ml/serve.v2": 0.0}
    on_train = cfg.guarded(bare, queue="ml/train")
    assert (on_train.queue, on_train.wait_value_per_gpu_hour, on_train.wait_value_from) == \
        ("ml/train", 4.0, "queue ml/train")
    assert cfg.guarded(bare, queue="ml/serve.v2").wait_value_per_gpu_hour == 0.0
    other = cfg.guarded(bare, queue="ml/other")
    assert (other.wait_value_per_gpu_hour, other.wait_value_from) == \
        (2.5, "runtimes.waitValuePerGpuHour")
    own = cfg.guarded(Demand("ns/r", (), wait_value_per_gpu_hour=9.0), queue="ml/train")
    assert (own.wait_value_per_gpu_hour, own.wait_value_from) == (9.0, "the request")
    # Unset: nothing stated, the planner prices the on-demand GPU-hour.
    assert load_config_text(MINIMAL).guarded(bare, queue="ml/train") \
        .wait_value_per_gpu_hour is None


@pytest.mark.parametrize(
    ("group", "field", "words"),
    [
        ("maxSize: -1", "nodeGroups[0] (id g).maxSize", "greater than or equal to 0"),
        ("cpu: lots", "nodeGroups[0] (id g).cpu", "not a Kubernetes quantity"),
        ("gpu: {type: h100, count: 0}", "nodeGroups[0] (id g).gpu.count", "greater than 0"),
        ("gpu: {type: h100, count: 1, vram: 80}", "nodeGroups[0] (id g).gpu.vram",
         "unknown key; allowed keys: cores, count, dra, memory, mig, resource, type"),
        ("capacityTypes: [reserved, preemptible]", "nodeGroups[0] (id g).capacityTypes[1]",
         "'reserved', 'on-demand' or 'spot'"),
        ("scaleUp: eventually", "nodeGroups[0] (id g).scaleUp", "'atomic' or 'partial'"),
        ("taints: [{key: k, effect: Sometimes}]", "nodeGroups[0] (id g).taints[0].effect",
         "NoSchedule"),
        ("labels: {'bad key!': x}", "nodeGroups[0] (id g).labels", "not a valid Kubernetes label"),
        ("bootTime: slow", "nodeGroups[0] (id g).bootTime", "not a duration"),
        ("options: {maxNodeProvisionTime: 5 minutes}",
         "nodeGroups[0] (id g).options.maxNodeProvisionTime", "not a duration"),
        ("options: {scaleDownUtilizationThreshold: 2}",
         "nodeGroups[0] (id g).options.scaleDownUtilizationThreshold", "less than or equal to 1"),
        # resource.k8s.io/v1 int attributes are int64 (the template's slices carry them).
        ("gpu: {type: h100, count: 1, dra: {attributes: {rack: 9223372036854775808}}}",
         "nodeGroups[0] (id g).gpu.dra.attributes",
         "rack: 9223372036854775808 does not fit a DRA int attribute (64-bit)"),
        ("devices: [{driver: dra.net, count: 2, spread: {numa: 99999999999999999999}}]",
         "nodeGroups[0] (id g).devices[0].spread", "numa: 99999999999999999999 does not fit"),
    ],
)
def test_group_field_errors(group: str, field: str, words: str) -> None:
    key = group.split(":", 1)[0]  # the field under test replaces the valid one
    fields = "".join(f"    {line}\n" for line in ("cpu: 4", "memory: 16Gi", "maxSize: 3")
                     if not line.startswith(f"{key}:"))
    text = ("cluster: c1\n" + FAKE + "nodeGroups:\n  - id: g\n    zone: z\n    instanceType: t\n"
            + fields + "    " + group + "\n")
    got = problems(text)
    assert any(f == field and words in m for f, m in got), got


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("minSize: 5", "minSize (5) must be <= maxSize (3)"),
        ("capacityTypes: [spot]", "capacityTypes has spot but price.spot is not set"),
        ("capacityTypes: [reserved, reserved]", "capacityTypes lists a type twice"),
    ],
)
def test_group_cross_field_errors(extra: str, words: str) -> None:
    text = (
        "cluster: c1\n" + FAKE + "nodeGroups:\n  - id: g\n    zone: z\n    instanceType: t\n"
        "    cpu: 4\n    memory: 16Gi\n    maxSize: 3\n    " + extra + "\n"
    )
    got = problems(text)
    assert got == [("nodeGroups[0] (id g)", words)]


def test_cross_section_errors() -> None:
    text = MINIMAL + "  - {id: g, zone: z, instanceType: t, cpu: 1, memory: 1Gi, maxSize: 1}\n"
    assert problems(text) == [("nodeGroups", "ids must be unique; repeated: g")]
    text = MINIMAL.replace("maxSize: 4,", "maxSize: 4, reservations: [r-x],")
    text = text.replace(FAKE, "cloud:\n  fake:\n    reservations: "
                        "[{id: r-y, zone: z, instanceType: t, count: 1}]\n")
    assert problems(text) == [
        ("nodeGroups[0].reservations[0]",
         "unknown reservation 'r-x'; cloud.fake.reservations has: r-y"),
    ]


def test_fake_cloud_errors() -> None:
    text = MINIMAL.replace(FAKE, (
        "cloud:\n  fake:\n    reservations:\n"
        "      - {id: cb, zone: z, instanceType: t, count: 1, kind: capacity-block}\n"
        "      - {id: cb, zone: z, instanceType: t, count: 0}\n"
        "    stockouts: [{zone: z, instanceType: t, capacityType: cheap}]\n"
    ))
    got = dict(problems(text))
    assert "greater than 0" in got["cloud.fake.reservations[1] (id cb).count"]
    assert "capacityType" in " ".join(got)
    assert "needs startsAt and endsAt" in got["cloud.fake.reservations[0] (id cb)"]


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cluster: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad.yaml: not valid YAML"):
        load_config(bad)
    bad.write_text("- a list\n")
    with pytest.raises(ConfigError, match="mapping at the top level"):
        load_config(bad)
    bad.write_text("cluster: c\n" + FAKE)
    with pytest.raises(ConfigError, match="nodeGroups: required key is missing"):
        load_config(bad)


def test_cloud_sections_must_match_the_provider() -> None:
    text = MINIMAL.replace(FAKE, "cloud:\n  provider: aws\n")
    assert problems(text) == [("cloud", "cloud.provider is aws but cloud.aws is missing")]
    text = MINIMAL.replace(FAKE, "cloud:\n  provider: aws\n  aws: {region: us-east-1}\n")
    assert problems(text) == [(
        "nodeGroups[0] (id g).aws", "required when cloud.provider is aws (at least launchTemplate)"
    )]
    text = MINIMAL.replace("maxSize: 4,", "maxSize: 4, gcp: {machineType: a3-highgpu-8g},")
    assert problems(text) == [("nodeGroups[0] (id g).gcp", "set, but cloud.provider is fake")]


def test_the_simulated_cloud_needs_cpu_and_memory() -> None:
    text = ("cluster: c\n" + FAKE +
            "nodeGroups:\n  - {id: g, zone: z, instanceType: t, maxSize: 1}\n")
    assert problems(text) == [
        ("nodeGroups[0] (id g).cpu", "required for the simulated cloud (it describes no types)"),
        ("nodeGroups[0] (id g).memory", "required for the simulated cloud (it describes no types)"),
    ]


def test_groups_complete_from_the_clouds_shapes() -> None:
    from provider.domain.cloud import Shape

    text = (
        "cluster: c\ncloud: {provider: gcp, gcp: {project: p, region: us-central1}}\n"
        "nodeGroups:\n"
        "  - {id: a3, zone: us-central1-a, instanceType: a3-highgpu-8g, maxSize: 2}\n"
        "  - {id: cpu, zone: us-central1-a, instanceType: n2-standard-8, cpu: 7, memory: 28Gi,"
        " maxSize: 2}\n"
        "  - {id: typo, zone: us-central1-a, instanceType: a3-highgpu-9g, maxSize: 2}\n"
    )
    cfg = load_config_text(text, "cfg.yaml")
    assert [g.id for g in cfg.groups] == ["cpu"]
    assert cfg.unresolved == ("a3-highgpu-8g", "a3-highgpu-9g")
    a3 = Shape("a3-highgpu-8g", vcpus=208, memory_mib=1_916_928,
               gpu_type="nvidia-h100-80gb", gpu_count=8)
    with pytest.raises(ConfigError) as info:
        cfg.with_shapes({"a3-highgpu-8g": a3})
    assert info.value.problems == [(
        "nodeGroups[2] (id typo).instanceType",
        "the cloud does not describe 'a3-highgpu-9g'; check the name, or give cpu and memory "
        "(and gpu) yourself",
    )]
    done = cfg.with_shapes({"a3-highgpu-8g": a3, "a3-highgpu-9g": a3})
    group = done.groups[0]
    assert group.gpu_type == "nvidia-h100-80gb" and group.gpu_count == 8
    assert group.scale_up is ScaleUpMode.ATOMIC
    # Allocatable is capacity minus the kubelet's reservations.
    assert 207_000 < group.allocatable.get("cpu") < 208_000
    gib = group.allocatable.get("memory") / 1000 / 2**30
    assert 1800 < gib < 1872


def test_a_bare_on_or_off_for_leader_election_means_the_word() -> None:
    """YAML 1.1 reads `mode: on` as true; it was rejected as not one of auto/on/off."""
    from tests.kit.helpers import BASE_CONFIG, config

    assert config(BASE_CONFIG + "leaderElection: {mode: on}\n"
                  ).schema.leader_election.mode == "on"
    assert config(BASE_CONFIG + "leaderElection: {mode: off}\n"
                  ).schema.leader_election.mode == "off"


def test_a_key_given_twice_is_a_config_error_naming_it() -> None:
    """PyYAML keeps the last of two equal keys silently: `maxSize: 10` then `maxSize: 1`
    ran with 1. Now the file is refused with the key and its line."""
    from provider.config import ConfigError
    from tests.kit.helpers import BASE_CONFIG, config

    text = BASE_CONFIG.replace("    maxSize: 10\n", "    maxSize: 10\n    maxSize: 1\n", 1)
    with pytest.raises(ConfigError) as caught:
        config(text)
    message = str(caught.value)
    assert message == ("test.yaml: not valid YAML: line 18: key 'maxSize' given twice in the "
                       "mapping that starts at line 10"), message


def test_a_bad_queue_and_a_bad_value_are_reported_together() -> None:
    """Keys and values of runtimes.queues are checked in one pass: an operator sees every
    mistake of the mapping at once, each named by its key."""
    got = problems(MINIMAL + "runtimes: {waitValuePerGpuHour: -1, queues: {train: 2, ml/b: -3}}\n")
    fields = {f for f, _ in got}
    assert {"runtimes.waitValuePerGpuHour", "runtimes.queues.train",
            "runtimes.queues.ml/b"} <= fields, got
