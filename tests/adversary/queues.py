"""The gang schedulers' queues in the adversary's world: Volcano's ``default`` Queue and KAI
Scheduler's ``team-a`` Queue, whose GPU bound and use the moves change (and Volcano's state,
Open or Closed); and invariant Q1's record: a request the gang bridge creates for a Volcano
or KAI gang is for GPUs its queue had room for at some moment of that bridge pass (judged
here on the GPU rule alone, apart from the bridge's own code: Volcano's capability against
allocated, KAI's limit against allocated, -1 unlimited)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provider.controller.gang_bridge import GangBridge, GangKey
from provider.domain.gangs.sources import SourceName
from tests.fakes.kube import FakeKube, objects

Json = dict[str, Any]
GPU = "nvidia.com/gpu"
VOLCANO_QUEUE = "default"
KAI_QUEUE = "team-a"
VOLCANO_GROUP = "scheduling.volcano.sh"
KAI_GROUP = "scheduling.run.ai"
BOUNDS = (None, 0, 8, 16, 24)  # GPUs; None: no bound (Volcano: no capability, KAI: -1)
USED = (0, 8)


@dataclass(frozen=True, slots=True)
class QueueState:
    """One queue at one moment: its GPU bound (None: unbounded), GPUs in use, and whether
    it admits at all (exists, Open)."""

    bound: int | None
    used: int
    open: bool

    def admits(self, gpus: int) -> bool:
        # A bound is held only against a need for that resource: a gang that asks for no
        # GPUs is not judged by the GPU bound, though the GPUs in use are past it (Volcano
        # v1.10.0 Resource.LessEqualWithDimension skips a dimension the request does not
        # ask for, "quant > 0"; KAI's isOverLimit skips "requestedQty == 0").
        return self.open and (gpus == 0 or self.bound is None
                              or self.used + gpus <= self.bound)


@dataclass
class QueueWorld:
    kube: FakeKube
    # Every state the queues have had, oldest first: (scheduler, queue) -> state.
    log: list[dict[tuple[str, str], QueueState]] = field(default_factory=list)
    overruns: list[str] = field(default_factory=list)  # Q1's breaks
    held: int = 0  # bridge passes that held a gang back by its queue
    judged: int = 0  # requests Q1 judged

    def create(self) -> None:
        self.kube.create(objects.volcano_queue(VOLCANO_QUEUE))
        self.kube.create(objects.kai_queue(KAI_QUEUE, gpu=(-1, -1), cpu=(-1, -1),
                                           memory=(-1, -1)))
        self._snapshot()

    def change(self, rng: Any) -> str:
        """A queue's GPU bound and use change (another team's jobs came or went, an admin
        edited the queue); Volcano's is sometimes closed."""
        bound, used = rng.choice(BOUNDS), rng.choice(USED)
        if rng.random() < 0.5:
            state = "Closed" if rng.random() < 0.15 else "Open"

            def volcano(obj: Json) -> None:
                obj["spec"].pop("capability", None)
                if bound is not None:
                    obj["spec"]["capability"] = {GPU: str(bound)}
                obj["status"] = {"state": state, "allocated": {GPU: str(used)}}

            self.kube.modify("queues", VOLCANO_QUEUE, volcano, group=VOLCANO_GROUP)
            told = f"volcano queue {VOLCANO_QUEUE}: {state}, capability {bound}, used {used}"
        else:
            def kai(obj: Json) -> None:
                obj["spec"]["resources"]["gpu"]["limit"] = -1 if bound is None else bound
                obj["status"] = {"allocated": {GPU: str(used)}}

            self.kube.modify("queues", KAI_QUEUE, kai, group=KAI_GROUP)
            told = f"kai queue {KAI_QUEUE}: limit {bound}, used {used}"
        self._snapshot()
        return told

    def _snapshot(self) -> None:
        volcano = self.kube.get("queues", VOLCANO_QUEUE, group=VOLCANO_GROUP) or {}
        kai = self.kube.get("queues", KAI_QUEUE, group=KAI_GROUP) or {}
        cap = ((volcano.get("spec") or {}).get("capability") or {}).get(GPU)
        limit = (((kai.get("spec") or {}).get("resources") or {}).get("gpu") or {}).get(
            "limit", -1)
        self.log.append({
            ("volcano", VOLCANO_QUEUE): QueueState(
                None if cap is None else int(cap), _gpus(volcano), bool(volcano) and
                (volcano.get("status") or {}).get("state", "Open") == "Open"),
            ("kai", KAI_QUEUE): QueueState(None if limit == -1 else int(limit), _gpus(kai),
                                           bool(kai)),
        })

    def watch(self, bridge: GangBridge) -> None:
        """Q1's record for ``bridge``: each request it creates for a Volcano or KAI gang is
        judged against the queue states since its pass began."""
        pass_once, create, holds = bridge.pass_once, bridge._create, bridge._queue_holds
        began = [0]

        def holding(key: GangKey, obj: Mapping[str, Any],
                    pods: Sequence[Mapping[str, Any]]) -> bool:
            held = holds(key, obj, pods)
            self.held += held
            return held

        def passing() -> None:
            began[0] = len(self.log) - 1
            pass_once()

        def created(key: GangKey, gang: Mapping[str, Any], name: str,
                    pods: Sequence[Mapping[str, Any]]) -> Any:
            self._judge(key, gang, name, pods, self.log[began[0]:])
            return create(key, gang, name, pods)

        bridge.pass_once = passing  # type: ignore[method-assign]
        bridge._create = created  # type: ignore[method-assign]
        bridge._queue_holds = holding  # type: ignore[method-assign]

    def _judge(self, key: GangKey, gang: Mapping[str, Any], name: str,
               pods: Sequence[Mapping[str, Any]],
               states: list[dict[tuple[str, str], QueueState]]) -> None:
        scheduler = {SourceName.VOLCANO: "volcano", SourceName.KAI: "kai"}.get(key.source.name)
        if scheduler is None:
            return
        queue = str((gang.get("spec") or {}).get("queue") or
                    (VOLCANO_QUEUE if scheduler == "volcano" else ""))
        gpus = sum(_pod_gpus(p) for p in pods)
        self.judged += 1
        if not any(s.get((scheduler, queue), QueueState(0, 0, False)).admits(gpus)
                   for s in states):
            seen = [s.get((scheduler, queue)) for s in states]
            self.overruns.append(f"{name} asked for {gpus} GPUs of {scheduler} queue "
                                 f"{queue!r}, which had no room for them during the pass "
                                 f"(states {seen})")


def _gpus(queue: Json) -> int:
    value = ((queue.get("status") or {}).get("allocated") or {}).get(GPU, "0")
    return int(str(value))


def _pod_gpus(pod: Mapping[str, Any]) -> int:
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        total += int(str(((c.get("resources") or {}).get("requests") or {}).get(GPU, 0)))
    return total

