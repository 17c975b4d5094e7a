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
