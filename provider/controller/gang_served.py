"""Which gang APIs the cluster serves, and in which version, as the gang bridge found them:
said once when first found and again whenever it changes (an upgraded cluster, a CRD
installed or removed), in the log and to an observer (the metric
`allset_gang_api_served` and `allset status`), never silently.

A configured API that is not served means its gangs get no request: their pods are left to
CA's own scale-up, one by one."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from provider.controller.gang_api import GangApi
from provider.domain.gangs.sources import COMPOSITE, GangSource, SourceName

log = logging.getLogger(__name__)

# (API label, the version read or None when none is served, the versions looked for)
Observer = Callable[[str, str | None, tuple[str, ...]], None]


def _kinds(source: GangSource) -> str:
    return f"{source.group} {source.kind}"


class ServedApis:
    def __init__(self, api: GangApi, observer: Observer | None = None) -> None:
        self._api = api
        self._observer = observer
        self._known: dict[str, str | None] = {}

    def observe(self, observer: Observer) -> None:
        self._observer = observer
        for label, version in self._known.items():  # what was found before
            observer(label, version, ())

    def resolve(self, configured: Sequence[GangSource]
                ) -> tuple[list[GangSource], GangSource | None]:
        """The configured sources the cluster serves, in their served versions (in the
        configured order), and the CompositePodGroup source where the native one is
        served and so are groups of gangs."""
        served = []
        for source in configured:
            found = self._api.served(source)
            self._tell(source, found, warn=True)
            if found is not None:
                served.append(found)
        composite = None
        if any(s.name is SourceName.NATIVE for s in served):
            composite = self._api.served(COMPOSITE)
            self._tell(COMPOSITE, composite, warn=False)  # an alpha API: off by default
        return served, composite

    def _tell(self, source: GangSource, found: GangSource | None, *, warn: bool) -> None:
        version = found.version if found is not None else None
        label = source.label
        if label in self._known and self._known[label] == version:
            return
        before = self._known.get(label)
        self._known[label] = version
        looked = tuple(source.readable)
        if version is None:
            (log.warning if warn else log.info)(
                "gang API %s (%s) is not served by this cluster (looked for %s): %s",
                label, _kinds(source), ", ".join(looked),
                "its gangs get no request, and CA may scale their pods one by one" if warn
                else "its gangs are read as their PodGroups")
        elif before is None:
            log.info("gang API %s read as %s", label, source.at(version).api_version)
        else:
            log.info("gang API %s now read as %s (was %s)", label,
                     source.at(version).api_version, before)
        if self._observer is not None:
            self._observer(label, version, looked)
