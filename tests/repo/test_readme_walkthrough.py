"""The README's commands, run in order as a new user would, in a fresh directory with a
fresh HOME (so a fresh default --state-dir) (issue 15, "Must show"), then those of the
docs pages the README's other sections moved to (issue 30): PAGES, in the order a reader
follows the README's links. Each command is run as written, except: the fixed port 8086
becomes a free one (tests run side by side), and the commands that need what a test
cannot have (docker, a cluster, the whole check) are listed in SKIPPED with the reason."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.kit.cli import ALLSET, ROOT
from tests.kit.helpers import free_port, wait_until

SKIPPED = {
    "docker build": "needs docker (tests/repo/test_dockerfile.py checks the Dockerfile)",
    "kubectl apply": "needs a cluster (tests/repo/test_deploy.py renders the manifests)",
    "./scripts/check": "is the test suite itself",
    "kind create cluster": "needs kind and docker (tests/e2e/test_kind_walkthrough.py runs "
                           "the walkthrough on a real API server and kwok)",
    "kubectl create -f": "needs a cluster (tests/e2e/test_kind_walkthrough.py)",
    ".venv/bin/allset serve ...": "a placeholder for flags, not a command",
}
# Each takes 15-35 s of CPU (a week of a simulated fleet): run with ALLSET_README_ALL=1.
# tests/sim runs simulate on small traces, through the same code.
SLOW = (".venv/bin/allset simulate",)
RUN_SLOW = os.environ.get("ALLSET_README_ALL") == "1"
# The README, then the pages that hold the commands of its former sections.
PAGES = ("README.md", "docs/planning.md", "docs/crash-safety.md", "docs/simulation.md")


def readme_commands() -> list[str]:
    """Every command of PAGES' sh blocks, continuation lines joined, in order."""
    return [command for page in PAGES for command in page_commands(page)]


def page_commands(page: str) -> list[str]:
    """Every command of one page's sh blocks, continuation lines joined, in order.
    Lines of a block that follow a command and do not look like one are its output."""
    text = (ROOT / page).read_text(encoding="utf-8")
    commands: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.DOTALL):
        pending = ""
        for line in block.splitlines():
            if pending:
                pending += " " + line.strip()
            elif re.match(r"(\.venv/|python3 |grpcurl |docker |kubectl |kind |\./scripts/)", line):
                pending = line
            else:
                continue  # output shown under the command
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
            else:
                commands.append(re.sub(r"\s+#.*$", "", pending).strip())
                pending = ""
    return commands


def _skipped(command: str) -> bool:
    if not RUN_SLOW and command.startswith(SLOW):
        return True
    return any(command.startswith(prefix) for prefix in SKIPPED)


class Walk:
    def __init__(self, tmp: Path) -> None:
        self.cwd = tmp / "work"
        self.cwd.mkdir()
        for name in ("deploy", "bench"):
            (self.cwd / name).symlink_to(ROOT / name)
        (self.cwd / ".venv" / "bin").mkdir(parents=True)
        (self.cwd / ".venv" / "bin" / "allset").symlink_to(ALLSET)
        # "With your own config": the simulated example stands in for allset.yaml.
        shutil.copy(ROOT / "deploy" / "examples" / "simulated.yaml", self.cwd / "allset.yaml")
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp / "home")}
        self.env.pop("KUBERNETES_SERVICE_HOST", None)
        self.port = free_port()
        self.servers: list[subprocess.Popen[bytes]] = []
        self.log = tmp / "serve.log"

    def shell(self, command: str) -> subprocess.CompletedProcess[str]:
        command = command.replace("127.0.0.1:8086", f"127.0.0.1:{self.port}")
        return subprocess.run(["bash", "-c", command], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=300, check=False)

    def background(self, command: str) -> None:
        with open(self.log, "ab") as out:
            self.servers.append(subprocess.Popen(["bash", "-c", f"exec {command}"],
                                                 cwd=self.cwd, env=self.env, stdout=out,
                                                 stderr=out))

    def stop(self) -> None:
        for proc in self.servers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()


# Every README command in order, a fresh virtualenv's install among them (~1 min quiet);
# with the slow ones (RUN_SLOW) the test suite too.
@pytest.mark.timeout(900 if RUN_SLOW else 240)
def test_readme_commands_in_order(tmp_path: Path) -> None:
    commands = readme_commands()
    assert len(commands) >= 15, commands
    walk = Walk(tmp_path)
    grpcurl = shutil.which("grpcurl") or shutil.which("grpcurl", path=str(ROOT / ".ci" / "bin"))
    if grpcurl:
        (walk.cwd / "bin").mkdir()
        (walk.cwd / "bin" / "grpcurl").symlink_to(grpcurl)
        walk.env["PATH"] = f"{walk.cwd / 'bin'}:{walk.env['PATH']}"
    ran: list[str] = []
    try:
        for command in commands:
            if _skipped(command):
                continue
            if command.startswith("python3 -m venv"):
                # The venv is this test's; what the user then runs is the server.
                serve = command.rsplit("&& ", 1)[1]
                walk.background(f"{serve} --address 127.0.0.1:{walk.port}")
                _wait_for_line(walk, f"on 127.0.0.1:{walk.port}")
            elif " serve --tls-cert" in command:
                tls_port = free_port()
                walk.background(f"{command} --address 127.0.0.1:{tls_port}")
                _wait_for_line(walk, f"on 127.0.0.1:{tls_port} [mTLS]")
            elif command.startswith("grpcurl"):
                if not grpcurl:
                    continue
                done = walk.shell(command)
                assert done.returncode == 0, (command, done.stderr)
                if command.endswith("/NodeGroupNodes"):
                    _six_nodes(walk, command)
            else:
                done = walk.shell(command)
                assert done.returncode == 0, (command, done.stderr)
                assert "Traceback" not in done.stderr, (command, done.stderr)
            ran.append(command)
    finally:
        walk.stop()
    assert "Traceback" not in walk.log.read_text(), walk.log.read_text()
    assert (walk.cwd / "fleet.png").is_file() or not RUN_SLOW
    assert all(s.returncode == 0 for s in walk.servers), walk.log.read_text()
    missing = [c for c in commands if not _skipped(c) and c not in ran
               and not (c.startswith("grpcurl") and not grpcurl)]
    assert missing == []


def _wait_for_line(walk: Walk, text: str) -> None:
    def printed() -> bool:
        assert all(p.poll() is None for p in walk.servers), walk.log.read_text()
        return text in walk.log.read_text()

    wait_until(printed, timeout=60)


def _six_nodes(walk: Walk, command: str) -> None:
    """"The 6 nodes come 4 from the cr-h100-a reservation and 2 on demand"."""
    def six() -> bool:
        out = walk.shell(command).stdout
        return len(json.loads(out).get("instances", [])) == 6

    wait_until(six, timeout=60)


@pytest.mark.parametrize("prefix", sorted(SKIPPED))
def test_every_skip_still_names_a_readme_command(prefix: str) -> None:
    assert any(c.startswith(prefix) for c in readme_commands()), prefix


@pytest.mark.parametrize("page", PAGES)
def test_every_page_still_holds_commands(page: str) -> None:
    """A page whose commands moved again must leave PAGES (or the walk would silently lose
    them), and each docs page of PAGES is one the README links to."""
    assert page_commands(page), f"{page} holds no command"
    if page != "README.md":
        readme = (ROOT / "README.md").read_text(encoding="utf-8")
        assert f"]({page})" in readme, f"the README does not link {page}"


def test_the_readme_starts_with_the_first_command() -> None:
    """What "Run it" asks first is the README's first command, not a docs page's."""
    first = page_commands("README.md")[0]
    assert first.startswith("python3 -m venv .venv && "), first
    assert first.endswith(" serve --insecure"), first
