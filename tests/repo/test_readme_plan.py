"""The `allset plan` example (the README's until issue 30, now docs/planning.md, which the
README points to) prints what it shows, even after a server was started from the same
example config (issue 15, item 9), and a relative statePath is relative to the config
file, not to the directory allset was started in."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import grpc
import pytest

from adapters.registry import connect
from provider.base.clock import ManualClock
from provider.config import load_config
from provider.wire import externalgrpc_pb2 as pb
from provider.wire import externalgrpc_pb2_grpc as pb_grpc
from tests.kit.cli import ROOT, Served, run_allset
from tests.kit.helpers import free_port, wait_until

EXAMPLE = ROOT / "deploy" / "examples" / "simulated.yaml"
PLANNING = ROOT / "docs" / "planning.md"


def readme_plan() -> tuple[list[str], str]:
    """docs/planning.md's first plan command (its arguments) and the output it shows."""
    text = PLANNING.read_text(encoding="utf-8")
    block = re.search(r"```sh\n\.venv/bin/allset plan (.*?)```", text, flags=re.DOTALL)
    assert block is not None
    command, _, output = block.group(1).partition("\n    ")
    args, _, shown = ("plan " + command.rstrip(" \\") + " " + output).partition("\n")
    return args.split(), shown


def test_the_readme_points_to_the_plan_example() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "](docs/planning.md)" in readme


def test_readme_plan_answers_as_shown_after_a_serve(tmp_path: Path) -> None:
    args, shown = readme_plan()
    assert "h100-a  reserved   cr-h100-a" in shown, shown  # the block read is the example
    assert run_allset(*args).stdout == shown  # before any server ran
    metrics = free_port()
    served = Served(["--config", str(EXAMPLE), "--state-dir", str(tmp_path / "state"),
                     "--metrics-address", f"127.0.0.1:{metrics}"],
                    tmp_path / "serve.log", cwd=ROOT)
    try:
        wait_until(served.answers, timeout=60)
        with grpc.insecure_channel(served.address) as channel:
            pb_grpc.CloudProviderStub(channel).NodeGroupIncreaseSize(
                pb.NodeGroupIncreaseSizeRequest(id="h100-a", delta=4), timeout=10)

        def launched() -> bool:
            url = f"http://127.0.0.1:{metrics}/metrics"
            with urllib.request.urlopen(url) as r:
                text = r.read().decode()
            return 'allset_attempts_total{outcome="succeeded",reason=""} 1.0' in text

        wait_until(launched, timeout=60)
    finally:
        assert served.stop() == 0, served.text()
    result = run_allset(*args)
    assert result.returncode == 0, result.stderr
    assert result.stdout == shown
    assert not (ROOT / "state").exists() and not (EXAMPLE.parent / "state").exists()


def test_relative_state_path_is_beside_the_config(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "conf" / "allset.yaml"
    config.parent.mkdir()
    config.write_text(EXAMPLE.read_text().replace("# statePath: state/cloud.db",
                                                  "statePath: state/cloud.db"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    adapter, _ = connect(load_config(config), ManualClock())
    adapter.close()
    assert (tmp_path / "conf" / "state" / "cloud.db").is_file()
    assert not (elsewhere / "state").exists()
