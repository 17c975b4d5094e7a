"""Which gang a pod belongs to when it names gangs of more than one API (pure)."""

from __future__ import annotations

from typing import Any

from provider.domain.gangs.sources import (
    COSCHEDULING_LABEL,
    SOURCES,
    VOLCANO_ANNOTATION,
    GangRef,
    Naming,
    SourceName,
    naming,
)
from tests.domain.gangs.test_yunikorn import guide_pod as yunikorn_guide_pod
from tests.domain.gangs.test_yunikorn import placeholder as yunikorn_placeholder

NATIVE = SOURCES[SourceName.NATIVE]
COSCHED = SOURCES[SourceName.COSCHEDULING]
VOLCANO = SOURCES[SourceName.VOLCANO]


def pod(*, native: str = "", cosched: str = "", volcano: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": {COSCHEDULING_LABEL: cosched} if cosched else {},
                            "annotations": {VOLCANO_ANNOTATION: volcano} if volcano else {}}
    spec = {"schedulingGroup": {"podGroupName": native}} if native else {}
    return {"metadata": meta, "spec": spec}


def test_a_pod_of_one_api_belongs_to_its_gang_and_passes_over_none() -> None:
    assert naming(pod(volcano="vb"), [NATIVE, COSCHED, VOLCANO]) == Naming(
        GangRef(VOLCANO, "vb"))


def test_a_pod_of_two_apis_belongs_to_the_first_sources_gang() -> None:
    both = pod(cosched="ca", volcano="vb")
    assert naming(both, [NATIVE, COSCHED, VOLCANO]) == Naming(
        GangRef(COSCHED, "ca"), (GangRef(VOLCANO, "vb"),))
    assert naming(both, [VOLCANO, COSCHED]) == Naming(
        GangRef(VOLCANO, "vb"), (GangRef(COSCHED, "ca"),))


def test_a_source_not_given_names_nothing() -> None:
    """A source left out of gangs.sources (or not served) cannot claim a pod."""
    assert naming(pod(native="n", volcano="vb"), [VOLCANO]) == Naming(GangRef(VOLCANO, "vb"))
    assert naming(pod(native="n"), [COSCHED, VOLCANO]) is None
    assert str(GangRef(COSCHED, "ca")) == "coscheduling/ca"


def test_a_kai_pod_names_its_pod_group_by_annotation() -> None:
    """KAI's pod-grouper writes ``pod-group-name`` on each pod (KAI-scheduler v0.12.0,
    pkg/common/constants, PodGroupAnnotationForPod); a pod that a Volcano annotation names
    too belongs to the source listed first."""
    kai = SOURCES[SourceName.KAI]
    named = pod()
    named["metadata"]["annotations"]["pod-group-name"] = "pg-train-0"
    assert naming(named, list(SOURCES.values())) == Naming(GangRef(kai, "pg-train-0"))
    assert kai.api_version == "scheduling.run.ai/v2alpha2"
    assert kai.min_member({"spec": {"minMember": 3, "queue": "team-a"}}) == 3
    both = pod(volcano="vb")
    both["metadata"]["annotations"]["pod-group-name"] = "pg"
    assert naming(both, [VOLCANO, kai]) == Naming(GangRef(VOLCANO, "vb"), (GangRef(kai, "pg"),))


def test_placeholders_belong_to_the_originators_gang_and_real_pods_to_none() -> None:
    sources = list(SOURCES.values())
    found = naming(yunikorn_placeholder("driver-0"), sources)
    assert found is not None and found.gang.source.name is SourceName.YUNIKORN
    assert found.gang.name == "driver-0"
    assert naming(yunikorn_guide_pod(), sources) is None
    gang = SOURCES[SourceName.YUNIKORN]
    assert gang.api_version == "v1" and gang.kind == "Pod"
    assert gang.min_member(yunikorn_guide_pod()) == 2
