"""`allset validate --config FILE` (issue 35, item 6): the pre-flight check, offline.
Through the console script: exit 0 with one OK line, or 1 with one line per problem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.kit.cli import ROOT, one_line, run_allset

CONFIGS = sorted([*(ROOT / "deploy" / "examples").glob("*.yaml"),
                  *(ROOT / "deploy" / "kubernetes").glob("**/config.yaml")])
# Anything that would make a cloud call fail at once, were one made.
OFFLINE = {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": "", "AWS_PROFILE": "nobody",
           "AWS_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_EC2_METADATA_DISABLED": "true",
           "GOOGLE_APPLICATION_CREDENTIALS": "/nonexistent", "HTTPS_PROXY": "http://127.0.0.1:1",
           "NO_PROXY": ""}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_config_validates(config: Path) -> None:
    out = run_allset("validate", "--config", str(config), env=OFFLINE, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    (line,) = out.stdout.splitlines()
    assert line.startswith(f"allset: {config}: OK: ")


def test_a_cloud_config_is_validated_without_its_sdk_or_credentials() -> None:
    """Validate imports no cloud SDK: it could not call the cloud if it tried."""
    code = ("import sys; from provider.cli.main import main; "
            f"rc = main(['validate', '--config', {str(ROOT / 'deploy/examples/aws.yaml')!r}]); "
            "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in "
            "('boto3', 'botocore') or m.startswith('google.cloud')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), **OFFLINE}, check=False,
                          timeout=60)
    assert done.stdout.splitlines()[-1] == "0 []", done
    assert "the shapes of m7i.2xlarge, p5.48xlarge are left to the cloud" in done.stdout


def refused(config: Path, text: str) -> list[str]:
    """What validate prints of ``text`` written to ``config``: it must refuse it."""
    config.write_text(text)
    out = run_allset("validate", "--config", str(config))
    assert out.returncode == 1 and out.stdout == ""
    assert "Traceback" not in out.stderr
    return out.stderr.splitlines()


def test_one_line_per_problem(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    lines = refused(config, "cluster: c\ncloud: {provider: fake}\nnodeGroups:\n"
                    "  - {id: a, zone: z, instanceType: t, cpu: 1, memory: 1Gi, maxSize: -1,"
                    " colour: red}\n"
                    "  - {id: b, zone: z, instanceType: t, cpu: 1, memory: 1Gi, maxSize: 2,"
                    " scaleUp: sometimes}\n")
    assert len(lines) == 3, lines
    assert all(line.startswith(f"allset: {config}: nodeGroups[") for line in lines)
    assert any("(id a).colour: unknown key" in line for line in lines)
    assert any("(id a).maxSize" in line for line in lines)
    assert any("(id b).scaleUp" in line for line in lines)


def test_rules_across_sections(tmp_path: Path) -> None:
    config = tmp_path / "refs.yaml"
    config.write_text("cluster: c\ncloud: {provider: fake, fake: {}}\nnodeGroups:\n"
                      "  - {id: a, zone: z, instanceType: t, cpu: 1, memory: 1Gi, maxSize: 2,"
                      " reservations: [cr-x]}\n")
    out = run_allset("validate", "--config", str(config))
    assert out.returncode == 1
    assert one_line(out.stderr) == (
        f"allset: {config}: nodeGroups[0].reservations[0]: unknown reservation 'cr-x'; "
        "cloud.fake.reservations has: none")


def test_a_state_path_is_checked_and_nothing_is_created(tmp_path: Path) -> None:
    (tmp_path / "blocker").write_text("")
    config = tmp_path / "sim.yaml"
    text = (ROOT / "deploy" / "examples" / "simulated.yaml").read_text()
    for state_path, problem in (("blocker/sub/cloud.db", f"{tmp_path}/blocker is not a "
                                 "directory"), ("state/deeper/cloud.db", None)):
        config.write_text(text.replace("    # statePath: state/cloud.db\n",
                                       f"    statePath: {state_path}\n"))
        out = run_allset("validate", "--config", str(config))
        if problem is None:
            assert out.returncode == 0, out.stderr
        else:
            assert out.returncode == 1
            assert one_line(out.stderr) == (
                f"allset: {config}: cloud.fake.statePath: cannot create "
                f"{tmp_path}/{state_path}: {problem}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker", "sim.yaml"]


def _simulated(config: Path, state_path: str) -> None:
    text = (ROOT / "deploy" / "examples" / "simulated.yaml").read_text()
    config.write_text(text.replace("    # statePath: state/cloud.db\n",
                                   f"    statePath: {state_path}\n"))


def test_a_state_path_that_is_not_a_database_is_refused_as_serve_refuses_it(
        tmp_path: Path) -> None:
    """It passed validate, while serve exits on it: validate says serve's line, and neither
    changes the file nor creates anything beside it."""
    served, checked = tmp_path / "served", tmp_path / "checked"
    for where in (served, checked):
        where.mkdir()
        (where / "notes.db").write_text("not SQLite\n")
        _simulated(where / "sim.yaml", "notes.db")
    state = checked / "notes.db"
    before = (state.read_bytes(), state.stat().st_mode, state.stat().st_mtime_ns)
    out = run_allset("validate", "--config", str(checked / "sim.yaml"), cwd=checked)
    assert out.returncode == 1 and out.stdout == ""
    line = one_line(out.stderr)
    assert line == (f"allset: {checked}/sim.yaml: cloud.fake.statePath: cannot create or "
                    f"open {state}: file is not a database; give a file allset may create "
                    "(its directory too) or one it wrote before (a relative path is "
                    "relative to the config file)")
    assert (state.read_bytes(), state.stat().st_mode, state.stat().st_mtime_ns) == before
    assert sorted(p.name for p in checked.iterdir()) == ["notes.db", "sim.yaml"]
    serve = run_allset("serve", "--insecure", "--address", "127.0.0.1:0", "--config",
                       str(served / "sim.yaml"), "--state-dir", str(served / "state"),
                       cwd=served, timeout=60)
    assert serve.returncode == 1
    assert one_line(serve.stderr) == line.replace(str(checked), str(served))


def test_a_state_path_allset_wrote_validates_untouched(tmp_path: Path) -> None:
    from adapters.fake.store import FakeStore

    FakeStore(tmp_path / "cloud.db").close()  # as the simulated cloud leaves it (WAL)
    files = sorted(p.name for p in tmp_path.iterdir())
    before = (tmp_path / "cloud.db").read_bytes()
    _simulated(tmp_path / "sim.yaml", "cloud.db")
    out = run_allset("validate", "--config", str(tmp_path / "sim.yaml"))
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "cloud.db").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*files, "sim.yaml"])


def test_every_problem_of_the_rules_across_fields(tmp_path: Path) -> None:
    """A group's minSize above its maxSize hid the repeated id elsewhere, and each rule
    stopped at its first problem: now one line per problem, all of them."""
    config = tmp_path / "rules.yaml"
    lines = refused(config, (
        "cluster: c\n"
        "cloud: {provider: fake, fake: {shared: true, terminateSeconds: 5},"
        " aws: {region: us-east-1}}\n"
        "nodeGroups:\n"
        "  - {id: a, zone: z, instanceType: t, cpu: 1, memory: 1Gi, minSize: 5, maxSize: 2,"
        " capacityTypes: [on-demand, on-demand]}\n"
        "  - {id: b, zone: z, instanceType: t, cpu: 1, memory: 1Gi, maxSize: 2}\n"
        "  - {id: a, zone: z, instanceType: t, cpu: 1, memory: 1Gi, maxSize: 2}\n"))
    assert sorted(lines) == sorted(f"allset: {config}: {line}" for line in (
        "cloud: cloud.aws is set but cloud.provider is fake",
        "cloud.fake: shared: processes share the cloud through statePath; set it",
        "cloud.fake: shared: terminateSeconds must be 0 (shutting-down is timed per process)",
        "nodeGroups: ids must be unique; repeated: a",
        "nodeGroups[0] (id a): minSize (5) must be <= maxSize (2)",
        "nodeGroups[0] (id a): capacityTypes lists a type twice",
    )), lines


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    out = run_allset("validate", "--config", str(tmp_path / "nope.yaml"))
    assert out.returncode == 1
    assert one_line(out.stderr).startswith(f"allset: {tmp_path}/nope.yaml: cannot read")


def test_a_file_that_is_not_yaml_is_one_line(tmp_path: Path) -> None:
    """Was PyYAML's four lines, quoting the source with a caret."""
    config = tmp_path / "broken.yaml"
    config.write_text("nodeGroups: [\n")
    out = run_allset("validate", "--config", str(config))
    assert out.returncode == 1
    assert one_line(out.stderr) == (
        f"allset: {config}: not valid YAML: line 2, column 1: expected the node content, "
        "but found '<stream end>'")
