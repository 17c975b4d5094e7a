#!/usr/bin/env python3
"""Write docs/stable-surface.json: what allset promises to keep between versions
(docs/compatibility.md), read from the code itself.

    python scripts/stable_surface.py           # rewrite the record (a deliberate change)
    python scripts/stable_surface.py --check   # exit 1, with the difference, when it is stale

The record holds the config schema (every key, its type, limits and default), the command
line (every command and flag, with its choices and default), the metrics (names, types,
label names and the label values that exist from the start), the tags and labels allset
writes on cloud instances, the labels and annotations it reads and writes on Kubernetes
objects, the ProvisioningRequest class and parameters, the admin service's methods, and
the SQLite files it keeps (the attempt journal, the simulated cloud's state).
tests/repo/test_stable_surface.py runs --check, so a change to any of these fails the
tests until the record is rewritten and the change is written in CHANGELOG.md.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import re
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import gen_config_docs  # noqa: E402
from prometheus_client import CollectorRegistry  # noqa: E402
from prometheus_client.metrics import MetricWrapperBase  # noqa: E402

RECORD = ROOT / "docs" / "stable-surface.json"
# Metrics whose label values name the build (version, commit): their names are recorded.
_PER_BUILD = {"allset_build_info"}
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def config_schema() -> dict[str, str]:
    """``path.key`` -> "type; limits | default", as the config reference states them."""
    found = gen_config_docs.sections()
    by_model = {s.model: s for s in found}
    out: dict[str, str] = {}
    for section in found:
        for name, field in section.model.model_fields.items():
            key = field.alias or name
            kind = gen_config_docs._field_type(field, by_model, section.page)
            limits = gen_config_docs._limits(field)
            if limits:
                kind += "; " + ", ".join(limits)
            where = f"{section.path}.{key}" if section.path else key
            out[where] = _LINK.sub(r"\1", f"{kind} | {gen_config_docs._default(field)}")
    return out


def command_line() -> dict[str, dict[str, Any]]:
    """Command -> flag -> what it takes (choices, default, required)."""
    from provider.cli.main import _parser

    parser = _parser()
    commands = {"": parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            commands.update(action.choices)
    out: dict[str, dict[str, Any]] = {}
    for name, command in sorted(commands.items()):
        flags: dict[str, Any] = {}
        for action in command._actions:
            if not action.option_strings or isinstance(action, argparse._HelpAction):
                continue
            about: dict[str, Any] = {}
            if action.choices:
                about["choices"] = list(action.choices)
            if action.default not in (None, argparse.SUPPRESS, False):
                # A default under the home directory is recorded as ~/..., the same for all.
                about["default"] = str(action.default).replace(str(Path.home()), "~", 1)
            if action.required:
                about["required"] = True
            if action.nargs == 0:
                about["switch"] = True
            flags[", ".join(action.option_strings)] = about
        out[name or "(every command)"] = flags
    return out


def metrics() -> dict[str, dict[str, Any]]:
    """Every metric a serving allset can export, with its labels; label values that exist
    before anything happened (the bounded sets alerts are written against) are listed."""
    from provider.attempts.metrics import Metrics
    from provider.controller.request_metrics import RequestMetrics

    registry = CollectorRegistry()
    Metrics(registry).collect_fleet(lambda: ([], {}, {}))
    RequestMetrics(registry)
    out: dict[str, dict[str, Any]] = {}
    for collector in list(registry._collector_to_names):
        if isinstance(collector, MetricWrapperBase):
            labels: tuple[str, ...] = collector._labelnames
            kind = collector._type
        for family in collector.collect():
            if not isinstance(collector, MetricWrapperBase):
                labels, kind = getattr(family, "_labelnames", ()), family.type
            about: dict[str, Any] = {"type": kind, "labels": list(labels)}
            values = {label: sorted({s.labels[label] for s in family.samples})
                      for label in labels}
            if any(values.values()) and family.name not in _PER_BUILD:
                about["values"] = values
            out[family.name + ("_total" if kind == "counter" else "")] = about
    return dict(sorted(out.items()))


def instance_tags() -> dict[str, Any]:
    """The tag keys on EC2 instances and label keys on GCE instances that record ownership
    (reconcile rebuilds everything from them), and how GCE label values are encoded."""
    from adapters.aws import tags
    from adapters.gcp import labels

    def keys(module: Any, prefix: str) -> list[str]:
        return sorted(v for k, v in vars(module).items()
                      if k.isupper() and isinstance(v, str) and v.startswith(prefix)
                      and v != prefix)

    return {"aws": keys(tags, tags.PREFIX), "gcp": keys(labels, labels.PREFIX),
            "gcpValueEncoding": {v: labels.encode(v) for v in
                                 ("prod-east", "team-a/train.v2", "0.1", "Ünïcode")}}


def kubernetes_objects() -> dict[str, Any]:
    """Label and annotation keys (every ``allset.dev/...`` literal of the code), the
    ProvisioningRequest class and its parameters."""
    from provider.domain.demand import CLASS_NAME
    from provider.domain.provreq import PARAMETERS

    keys: set[str] = set()
    for path in sorted((ROOT / "provider").rglob("*.py")):
        if "wire" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    re.fullmatch(r"allset\.dev/[a-z0-9-]+", node.value):
                keys.add(node.value)
    return {"provisioningClassName": CLASS_NAME, "parameters": sorted(PARAMETERS),
            "labelsAndAnnotations": sorted(keys)}


def admin_service() -> dict[str, Any]:
    from provider.service import admin

    return {"service": admin.SERVICE,
            "methods": sorted([admin.STATUS_METHOD, admin.PLAN_METHOD,
                               admin.INSTANCES_METHOD])}


def files() -> dict[str, Any]:
    """Tables and columns of the SQLite files allset keeps, as SQLite reports them."""
    from adapters.fake.store import FakeStore
    from provider.attempts.journal import SqliteJournal

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, open_file in (("attemptJournal", SqliteJournal), ("simulatedCloud", FakeStore)):
            path = Path(tmp) / name / "file.db"
            open_file(path)
            with sqlite3.connect(path) as db:
                tables = [t for (t,) in db.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
                out[name] = {t: [f"{c[1]} {c[2]}{' NOT NULL' if c[3] else ''}"
                                 f"{' PRIMARY KEY' if c[5] else ''}"
                                 for c in db.execute(f"PRAGMA table_info({t})")]
                             for t in tables}
    return out


def surface() -> dict[str, Any]:
    return {"config": config_schema(), "commandLine": command_line(), "metrics": metrics(),
            "instanceTags": instance_tags(), "kubernetes": kubernetes_objects(),
            "adminService": admin_service(), "files": files()}


def text() -> str:
    return json.dumps(surface(), indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the record differs from the code")
    args = parser.parse_args()
    now = text()
    if not args.check:
        RECORD.write_text(now, encoding="utf-8")
        return 0
    was = RECORD.read_text(encoding="utf-8") if RECORD.exists() else ""
    if now == was:
        return 0
    sys.stderr.writelines(difflib.unified_diff(
        was.splitlines(keepends=True), now.splitlines(keepends=True),
        "docs/stable-surface.json (recorded)", "the code now"))
    return 1


if __name__ == "__main__":
    sys.exit(main())
