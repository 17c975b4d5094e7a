"""The queues a gang's scheduler admits it through, read for the gang bridge before it asks
capacity for the gang (provider/domain/gangs/queues.py judges, by each scheduler's rules).

- Volcano: the PodGroup's ``spec.queue`` (``default`` when empty, the CRD's default), and
  its ``spec.parent`` ancestors: Queue, scheduling.volcano.sh/v1beta1, cluster-scoped.
- KAI: the PodGroup's ``spec.queue`` and its ``spec.parentQueue`` ancestors: Queue,
  scheduling.run.ai/v2, cluster-scoped; the PodGroup's PriorityClass when its
  preemptibility is not stated.
- YuniKorn: ``queues.yaml`` of the ConfigMap ``yunikorn-configs`` (else ``yunikorn-defaults``,
  the two YuniKorn reads: k8shim pkg/common/constants, ConfigMapName and
  DefaultConfigMapName) in YuniKorn's namespace, and the pods it has placed (one LIST,
  only when a YuniKorn gang is about to be asked for).

What cannot be judged is not held back: a scheduler's Queue API that is not served, a
read allset may not make (403), a YuniKorn configuration with no queues.yaml or one that
is not YAML. Each is said once in the log."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml
from kubernetes.client.rest import ApiException

from provider.controller.gang_api import GangApi, Unserved
from provider.controller.gang_objects import live
from provider.domain.gangs import queues as q
from provider.domain.gangs import yunikorn
from provider.domain.gangs.sources import GangSource, SourceName
from provider.domain.model import Resources

log = logging.getLogger(__name__)

VOLCANO_QUEUES = ("scheduling.volcano.sh", "v1beta1", "queues")
KAI_QUEUES = ("scheduling.run.ai", "v2", "queues")
PRIORITY_CLASSES = ("scheduling.k8s.io", "v1", "priorityclasses")
YUNIKORN_CONFIG_MAPS = ("yunikorn-configs", "yunikorn-defaults")
_MAX_DEPTH = 16  # queue ancestors followed at most

Pod = Mapping[str, Any]


class Held(enum.Enum):
    """A gang its queue holds back: nothing more is done for it on this pass."""

    HELD = "held"


HELD = Held.HELD


class QueueReader:
    def __init__(self, api: GangApi, yunikorn_namespace: str = "yunikorn") -> None:
        self._api = api
        self._yunikorn_namespace = yunikorn_namespace
        self._said: set[str] = set()

    def refusal(self, source: GangSource, gang: Mapping[str, Any], stuck: Sequence[Pod]
                ) -> q.QueueRefusal | None:
        """Why ``gang``'s queue would not admit it now, or None (it would, or there is no
        queue to judge). ``stuck``: the pods the gang would ask capacity for."""
        try:
            if source.name is SourceName.VOLCANO:
                return self._volcano(gang, stuck)
            if source.name is SourceName.KAI:
                return self._kai(gang, stuck)
            if source.name is SourceName.YUNIKORN:
                return self._yunikorn(gang, stuck)
        except Unserved as err:
            self._say(f"{source.name.value} queues: {err}; its gangs are not held back by "
                      "their queues")
        except ApiException as err:
            if err.status != 403:
                raise
            self._say(f"{source.name.value} queues may not be read (403 {err.reason}); its "
                      "gangs are not held back by their queues")
        return None

    def _say(self, what: str) -> None:
        if what not in self._said:
            self._said.add(what)
            log.warning("%s", what)

    def _chain(self, kind: tuple[str, str, str], leaf: str, parent: str
               ) -> dict[str, dict[str, Any] | None]:
        """The queue named ``leaf`` and its ancestors, by name (None: does not exist)."""
        read: dict[str, dict[str, Any] | None] = {}
        name = leaf
        while name and name not in read and len(read) < _MAX_DEPTH:
            read[name] = found = self._api.cluster_object(*kind, name)
            name = str(((found or {}).get("spec") or {}).get(parent) or "")
        return read

    def _volcano(self, gang: Mapping[str, Any], stuck: Sequence[Pod]) -> q.QueueRefusal | None:
        spec = gang.get("spec") or {}
        leaf = str(spec.get("queue") or "default")
        minimum = spec.get("minResources")
        return q.volcano(self._chain(VOLCANO_QUEUES, leaf, "parent"), leaf, q.total(stuck),
                         q.amounts(minimum) if isinstance(minimum, Mapping) else None)

    def _kai(self, gang: Mapping[str, Any], stuck: Sequence[Pod]) -> q.QueueRefusal | None:
        spec = gang.get("spec") or {}
        leaf = str(spec.get("queue") or "")
        if not leaf:
            return None  # KAI's pod-grouper always names one; nothing to judge
        priority = None
        if spec.get("priorityClassName") and spec.get("preemptibility") not in (
                "preemptible", "non-preemptible"):
            found = self._api.cluster_object(*PRIORITY_CLASSES,
                                             str(spec["priorityClassName"]))
            value = (found or {}).get("value")
            priority = value if isinstance(value, int) else None
        return q.kai(self._chain(KAI_QUEUES, leaf, "parentQueue"), leaf, q.total(stuck),
                     q.kai_preemptible(gang, priority))

    def _yunikorn(self, gang: Mapping[str, Any], stuck: Sequence[Pod]
                  ) -> q.QueueRefusal | None:
        tree = self._yunikorn_tree()
        if tree is None:
            return None
        path = q.yunikorn_path(tree, yunikorn.queue_of(gang))
        if path is None:
            return None
        usage: dict[str, Resources] = {}
        for pod in self._api.scheduled_by(yunikorn.SCHEDULER_NAME):
            if not (pod.get("spec") or {}).get("nodeName") or not live(pod):
                continue
            where = q.yunikorn_path(tree, yunikorn.queue_of(pod))
            if where is not None:
                usage[where] = usage.get(where, Resources()) + \
                    q.yunikorn_amounts(q.requests_of(pod))
        return q.yunikorn(tree, path, usage, q.total(stuck))

    def _yunikorn_tree(self) -> q.YuniKornQueues | None:
        for name in YUNIKORN_CONFIG_MAPS:
            found = self._api.config_map(self._yunikorn_namespace, name)
            text = ((found or {}).get("data") or {}).get("queues.yaml")
            if not text:
                continue
            where = f"ConfigMap {self._yunikorn_namespace}/{name} queues.yaml"
            try:
                config = yaml.safe_load(text)
                return q.yunikorn_queues(config if isinstance(config, Mapping) else {})
            except (yaml.YAMLError, ValueError) as err:
                self._say(f"{where}: {str(err).splitlines()[0]}; YuniKorn gangs are not "
                          "held back by their queues")
                return None
        return None


class HeldGangs:
    """The gangs held back by their queue, as last told to ``told`` (``(gang, why)`` when
    one is held or its reason changes, ``(gang, None)`` once it is not: asked for, gone, or
    no longer stuck)."""

    def __init__(self, told: Callable[[str, str | None], None] | None = None) -> None:
        self._told = told or (lambda _gang, _why: None)
        self._held: dict[str, str] = {}  # gang -> why, as last told
        self._now: set[str] = set()  # held on this pass

    def begin_pass(self) -> None:
        self._now = set()

    def hold(self, gang: str, why: str) -> bool:
        """``gang`` is held on this pass; True when that is news (or its reason is)."""
        self._now.add(gang)
        if self._held.get(gang) == why:
            return False
        self._held[gang] = why
        self._told(gang, why)
        return True

    def end_pass(self) -> None:
        for gang in set(self._held) - self._now:
            del self._held[gang]
            self._told(gang, None)
