"""Which of a new pod's annotations mark it as a gang's, for allset: the decision of the
mutating admission webhook (provider/controller/webhook.py serves it).

Cluster Autoscaler leaves out of its own scale-up every pending pod that carries the
annotation `autoscaling.x-k8s.io/consume-provisioning-request`, whatever request it names
(its ProvisioningRequestPodsFilter, with --enable-provisioning-requests). A gang's pods
marked when they are created are never open to CA's per-pod scale-up, so CA can never
launch nodes for them beside the request the gang bridge asks for (issue 53, item 6):
marking them later, on the bridge's next pass, left a window in which both launched.

The mark names the request the pod will most likely consume, for people and for allset's
pod cache: the gang's open request, else its next one. Which pods a request counts is the
bridge's record on the request (provider/controller/gang_bridge.py), not this guess. A pod
is marked only when it names a gang of a configured source the cluster serves, and that
gang, where it exists already, is one (a PodGroup with a basic policy is not): any other
pod is left to CA. Nothing here refuses a pod; a read that fails still marks it."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from provider.controller import conditions as c
from provider.controller.gang_api import GangApi
from provider.controller.gang_bridge import REQUEST_ANNOTATION, generation_of, request_name
from provider.controller.gang_objects import request_state
from provider.domain.demand import CLASS_NAME
from provider.domain.gangs.decide import RequestPhase
from provider.domain.gangs.sources import COMPOSITE, GangSource, SourceName, naming

log = logging.getLogger(__name__)

CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The annotations to add (empty: leave the pod as it is) and why, in a few words."""

    annotations: Mapping[str, str]
    why: str


class GangMarker:
    def __init__(self, api: GangApi, sources: Sequence[GangSource]) -> None:
        self._api = api
        self._sources = tuple(sources)

    def decide(self, pod: Mapping[str, Any], namespace: str) -> Verdict:
        """What to add to ``pod``, being created in ``namespace``."""
        notes = (pod.get("metadata") or {}).get("annotations") or {}
        if any(notes.get(k) for k in c.CONSUME_ANNOTATIONS):
            return Verdict({}, "consumes a request already")  # Kueue's, or a person's
        served = self._served()
        found = naming(pod, [s for s in served if not s.composite])
        if found is None:
            return Verdict({}, "names no gang")
        source, gang = found.gang.source, found.gang.name
        try:
            obj: Mapping[str, Any] | None = self._api.gang(source, namespace, gang)
            if obj is not None and source.min_member(obj) is None:
                return Verdict({}, f"{found.gang} is not a gang")
            source, gang, obj = self._unit(source, gang, obj, namespace, served)
            upcoming = self._upcoming(source, namespace, gang, obj)
        except Exception as err:  # the mark matters, the request it names less so
            log.warning("gang pod of %s/%s: %s; marked all the same", namespace,
                        found.gang, err)
            upcoming = _before_the_gang(source, gang)
        return Verdict({c.CONSUME_ANNOTATIONS[0]: upcoming, CLASS_ANNOTATION: CLASS_NAME},
                       f"of {found.gang}")

    def _served(self) -> list[GangSource]:
        """The configured sources the cluster serves. When the API server cannot say, the
        ones it served when it last could (all of them, before it ever did): a pod of a
        gang left to CA would be open to the double launch this mark is for."""
        # Groups of gangs come with the native source, as the bridge reads them
        # (gang_served.ServedApis.resolve).
        sources = self._sources
        if any(s.name is SourceName.NATIVE for s in sources):
            sources = (*sources, COMPOSITE)
        try:
            found = [self._api.served(s) for s in sources]
        except Exception as err:
            log.warning("which gang APIs are served is not known (%s): using the last "
                        "known", err)
            found = [self._api.was_served(s) for s in sources]
        return [s for s in found if s is not None]

    def _unit(self, source: GangSource, gang: str, obj: Mapping[str, Any] | None,
              namespace: str, served: Sequence[GangSource]
              ) -> tuple[GangSource, str, Mapping[str, Any] | None]:
        """The gang whose request the pod will consume: its PodGroup's CompositePodGroup
        when that is a gang (the bridge asks for the whole hierarchy in one request), else
        the PodGroup itself."""
        composite = next((s for s in served if s.composite), None)
        parent = ((obj or {}).get("spec") or {}).get("parentCompositePodGroupName")
        if composite is None or not isinstance(parent, str) or not parent:
            return source, gang, obj
        group = self._api.gang(composite, namespace, parent)
        if group is None or composite.min_member(group) is None:
            return source, gang, obj
        return composite, parent, group

    def _upcoming(self, source: GangSource, namespace: str, gang: str,
                  obj: Mapping[str, Any] | None) -> str:
        """The gang's open request, else the one it will ask for next."""
        if obj is None:
            return _before_the_gang(source, gang)
        meta = obj.get("metadata") or {}
        uid = str(meta.get("uid"))
        named = (meta.get("annotations") or {}).get(REQUEST_ANNOTATION)
        if not named:
            return request_name(source, gang, uid, 1)
        generation = generation_of(str(named))
        request = self._api.request(namespace, str(named))
        if request is not None and \
                request_state(request, generation).phase is RequestPhase.OPEN:
            return str(named)
        return request_name(source, gang, uid, generation + 1)


def _before_the_gang(source: GangSource, gang: str) -> str:
    """The mark of a pod whose gang object does not exist yet (its uid, which request
    names carry, is not known): generation 0, a request no one makes."""
    return request_name(source, gang, "", 0)


def json_patch(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> list[dict[str, Any]]:
    """JSON Patch operations (RFC 6902) that add ``annotations`` to ``pod``."""
    if not annotations:
        return []
    if not (pod.get("metadata") or {}).get("annotations"):
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(annotations)}]
    # RFC 6901: "~" and "/" in a key are written "~0" and "~1".
    return [{"op": "add", "value": value,
             "path": "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")}
            for key, value in annotations.items()]
