"""Traces are validated with errors that name the field; `allset simulate` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from provider.cli.main import _parser, main
from provider.config import ConfigError
from provider.sim.generate import generate
from provider.sim.run import STRATEGIES
from provider.sim.trace import dump_trace, load_trace, parse_trace, seconds
from tests.sim.kit import CPU, H100, group, job


def problems(raw: dict[str, object]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_trace(raw, "t.yaml")
    return str(caught.value)


def base(**changes: object) -> dict[str, object]:
    raw: dict[str, object] = {"shapes": {"h100": H100, "cpu": CPU},
                              "groups": [group("h100-a")], "jobs": [job("j1", ("h100", 2))]}
    raw.update(changes)
    return raw


def test_durations_take_days() -> None:
    assert seconds("2d12h") == 2.5 * 86400
    assert seconds("90s") == 90
    assert seconds(30) == 30
    with pytest.raises(ValueError):
        seconds("soon")


def test_errors_name_file_field_and_fix() -> None:
    assert "t.yaml: jobs[0] (name j1).podSets[0].nodes: Input should be less than or " \
        "equal to 64" in problems(base(jobs=[job("j1", ("h100", 65))]))
    assert "t.yaml: groups[0] (id h100-a).colour: unknown key" in problems(
        base(groups=[group("h100-a", colour="red")]))
    assert "groups[0] (id h100-a).shape: unknown shape 'b200'; shapes: cpu, h100" in problems(
        base(groups=[group("h100-a", shape="b200")]))
    assert "jobs[0] (name j1).podSets[0].shape: no group runs shape 'cpu'" in problems(
        base(jobs=[job("j1", ("cpu", 1))]))
    assert "a capacity block needs an end" in problems(
        base(reservations=[{"id": "cb", "shape": "h100", "zone": "z-a", "count": 2,
                            "kind": "capacity-block"}]))
    assert "jobs: ids must be unique; repeated: j1" in problems(
        base(jobs=[job("j1", ("h100", 1)), job("j1", ("h100", 1))]))
    assert "jobs[0] (name j1).arrival: " in problems(
        base(jobs=[{**job("j1", ("h100", 1)), "arrival": "later"}]))


def test_dump_and_load_round_trip(tmp_path: Path) -> None:
    trace = generate(seed=2, count=40, days=0.5)
    path = tmp_path / "trace.yaml"
    path.write_text(dump_trace(trace))
    assert load_trace(path) == trace
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace.model_dump(mode="json", by_alias=True)))
    assert load_trace(path) == trace


def test_bad_trace_file_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("shapes: {}\n")
    assert main(["simulate", "--trace", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}: shapes:" in err and f"{path}: groups: required key is missing" in err


def test_simulate_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "fleet.png"
    code = main(["simulate", "--generate", "4", "--jobs", "30", "--days", "0.25",
                 "--output", "json", "--plot", str(plot)])
    assert code == 0
    body = json.loads(capsys.readouterr().out)  # nothing else on stdout
    assert set(body["strategies"]) == set(STRATEGIES)
    assert body["trace"]["jobs"] == 30
    allset = body["strategies"]["allset"]
    assert allset["strandedGpuHours"] == 0
    assert {"onDemandCost", "reservedUtilisation", "waitP50Minutes", "waitP95Minutes",
            "jobsNeverStarted", "rollbacks"} <= set(allset)
    first, last = allset["series"][0], allset["series"][-1]
    assert first["hours"] == 0 and last["onDemandGpus"] == 0
    assert last["onDemandCost"] == pytest.approx(allset["onDemandCost"])
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Issue 57: the references beside the runs, ordered as they must be.
    refs = body["trace"]["references"]
    assert 0 < refs["fluid"] <= refs["noMigration"] < refs["noMigrationWithBoots"]
    assert allset["tuning"] == "the trace's settings" and set(allset["seeds"]) == {"0"}
    assert allset["waitP50Seconds"] == pytest.approx(allset["waitP50Minutes"] * 60)
    assert "waitP99Minutes" in allset


def test_simulate_seeds_and_tunings(capsys: pytest.CaptureFixture[str]) -> None:
    # Two seeds and the three tunings of the fair comparison: each strategy is reported at
    # its best, with every seed's figures, and allset's lead below the cheapest baseline.
    code = main(["simulate", "--generate", "4", "--jobs", "20", "--days", "0.25",
                 "--strategy", "allset", "--seeds", "2", "--tune", "--output", "json"])
    assert code == 0
    allset = json.loads(capsys.readouterr().out)["strategies"]["allset"]
    assert allset["tuning"] in ("CA defaults (10 min)", "1 min", "10 s")
    assert set(allset["seeds"]) == {"0", "1"}
    assert main(["simulate", "--generate", "4", "--jobs", "20", "--days", "0.25",
                 "--strategy", "per-pod", "--seeds", "0"]) == 1
    assert "--seeds must be at least 1" in capsys.readouterr().err


def test_simulate_text_one_strategy(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                    ) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(dump_trace(generate(seed=4, count=20, days=0.25)))
    assert main(["simulate", "--trace", str(path), "--strategy", "per-pod"]) == 0
    out = capsys.readouterr().out
    assert "per-pod" in out and "allset" not in out.splitlines()[1]
    assert "stranded GPU-hours" in out


def test_simulate_runtimes_switch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A 2-hour job and a block ending an hour in: with runtimes declared (the trace's
    # default) allset keeps it off the block; --runtimes undeclared is allset before that.
    raw = base(groups=[group("h100-a", reservations=["cb-a"])],
               jobs=[{**job("j1", ("h100", 2), hours=2), "expectedRuntime": "2h"}],
               reservations=[{"id": "cb-a", "shape": "h100", "zone": "z-a", "count": 2,
                              "kind": "capacity-block", "start": 0, "end": 3600}],
               settings={"horizon": 3600, "drain": 14400})
    path = tmp_path / "t.yaml"
    path.write_text(dump_trace(parse_trace(raw, "t.yaml")))
    interrupted = {}
    for runtimes in ("declared", "undeclared"):
        assert main(["simulate", "--trace", str(path), "--strategy", "allset",
                     "--runtimes", runtimes, "--output", "json"]) == 0
        figures = json.loads(capsys.readouterr().out)["strategies"]["allset"]
        interrupted[runtimes] = (figures["interruptions"], figures["interruptionsAvoidable"])
    assert interrupted == {"declared": (0, 0), "undeclared": (1, 1)}



@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_simulate_offers_every_registered_strategy(name: str) -> None:
    args = _parser().parse_args(["simulate", "--generate", "1", "--strategy", name])
    assert args.strategy == name
