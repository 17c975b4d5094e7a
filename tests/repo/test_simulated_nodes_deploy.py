"""deploy/kubernetes/components/simulated-nodes grants exactly what the simulated cloud's
Node registration calls (provider/controller/kube.py SIMULATED_NODE_CALLS), on top of the
base's grants, and nothing when left out."""

from __future__ import annotations

from pathlib import Path

from provider.controller.kube import CALLS, SIMULATED_NODE_CALLS, Call
from tests.kit.deploy import DEPLOY, kustomization, render, require_kustomize
from tests.repo.test_deploy import _granted


def _needed(calls: tuple[Call, ...]) -> set[tuple[str, str, str, bool, tuple[str, ...]]]:
    return {(c.group, c.resource, v, c.namespaced, tuple(sorted(c.names)))
            for c in calls for v in c.verbs}


def test_the_component_grants_node_registration_and_no_more(tmp_path: Path) -> None:
    require_kustomize()
    where = kustomization(tmp_path, resources=[DEPLOY / "base"],
                          components=[DEPLOY / "components" / "simulated-nodes"])
    assert _granted(render(where)) == _needed(CALLS + SIMULATED_NODE_CALLS)


def test_the_base_never_creates_nodes() -> None:
    require_kustomize()
    granted = _granted(render(DEPLOY / "base"))
    assert not granted & (_needed(SIMULATED_NODE_CALLS) - _needed(CALLS))
