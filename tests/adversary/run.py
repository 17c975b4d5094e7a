"""One seed: build the world, take random steps checking the invariants after each, then
bring the world to quiescence and check them all. Returns what happened and, if an
invariant broke, which one, where, and the steps that led there."""

from __future__ import annotations

import contextlib
import logging
import random
import uuid
from collections import Counter
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field

from adapters.fake import Stockout
from provider.base import failpoints
from provider.domain.cloud import CapacityType, InstanceState
from tests.adversary.actions import Adversary
from tests.adversary.invariants import check
from tests.adversary.observe import Observer
from tests.adversary.sched import HarnessError, yield_point
from tests.adversary.world import ALL_GROUPS, World, make_world

STEPS = 120
# Quiescence: rounds of (time passes, kubelets join, refresh, controller pass). Two
# rounds a grace period apart settle everything; a third checks that nothing moves.
QUIET_SECONDS = (1.0, 180.0, 180.0)
DRAIN_LIMIT = 20_000


@dataclass(frozen=True, slots=True)
class Break:
    invariant: str
    explanation: str
    detail: str
    step: int
    final: bool


@dataclass
class SeedResult:
    seed: int
    budget: int = STEPS  # random steps asked for (quiescence comes on top)
    steps: int = 0
    switches: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    reached: Counter[str] = field(default_factory=Counter)  # states the seed got to
    breaks: list[Break] = field(default_factory=list)
    trace: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.breaks

    def report(self, tail: int = 80) -> str:
        lines = [f"seed {self.seed}: {len(self.breaks)} invariant breaks"]
        for b in self.breaks:
            where = "at quiescence" if b.final else f"after step {b.step}"
            lines.append(f"  {b.invariant} ({b.explanation}) {where}: {b.detail}")
        lines.append(f"last {min(tail, len(self.trace))} of {len(self.trace)} steps:")
        lines.extend("  " + t for t in self.trace[-tail:])
        lines.append(f"replay: {replay_command(self.seed, self.budget)}")
        return "\n".join(lines)


def replay_command(seed: int, steps: int = STEPS) -> str:
    extra = f" --steps {steps}" if steps != STEPS else ""
    return f"python -m bench.adversary --seeds 1 --start {seed}{extra} --verbose"


@contextlib.contextmanager
def _deterministic(seed: int) -> Iterator[None]:
    """Attempt ids, request uids and retry jitter come from the seed; failpoints yield."""
    ids = random.Random(seed ^ 0x5EED)
    real_uuid4, real_hit = uuid.uuid4, failpoints.hit
    state = random.getstate()
    random.seed(seed)
    uuid.uuid4 = lambda: uuid.UUID(int=ids.getrandbits(128), version=4)

    def hit(name: str) -> None:
        yield_point(f"failpoint {name}")
        real_hit(name)

    failpoints.hit = hit
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        uuid.uuid4, failpoints.hit = real_uuid4, real_hit
        random.setstate(state)
        logging.disable(logging.NOTSET)


def run_seed(seed: int, steps: int = STEPS, ignore: Collection[str] = ()) -> SeedResult:
    """Run one seed; invariants named in ``ignore`` are not checked (to look past a known
    break while its fix is on the way)."""
    result = SeedResult(seed, budget=steps)
    with _deterministic(seed):
        world = make_world(seed)
        try:
            _run(world, steps, result, frozenset(ignore))
        except HarnessError as err:
            result.breaks.append(Break("H", "the harness itself", str(err), world.step_no,
                                       False))
        finally:
            result.trace = world.trace
            result.switches = world.sched.switches
            world.close()
    return result


def _run(world: World, steps: int, result: SeedResult, ignore: frozenset[str]) -> None:
    adversary = Adversary(world)
    observer = Observer(world)
    state_dir = world.workdir / "state" if world.rng.random() < 0.5 else None
    world.boot(ALL_GROUPS, state_dir)
    world.log(f"boot incarnation 1 {'with' if state_dir else 'without'} state dir")
    for _ in range(steps):
        adversary.step()
        if _checked(world, observer, result, False, ignore):
            break
    result.steps = world.step_no
    result.actions = adversary.counts
    if result.breaks:
        return
    def checked() -> bool:
        return _checked(world, observer, result, False, ignore)

    if not _quiesce(world, adversary, checked):
        _checked(world, observer, result, True, ignore)
    result.reached = _reached(world, observer, adversary)


def _reached(world: World, observer: Observer, adversary: Adversary) -> Counter[str]:
    """How far the seed got: evidence that the moves reach the states that matter."""
    instances = world.fake.all_instances()
    committed = {i.tags.attempt for i in instances if i.tags.committed}
    rolled_back = [i for i in instances
                   if not i.tags.committed and i.state is InstanceState.TERMINATED]
    return Counter({
        "gangs committed": len(committed),
        "requests Provisioned": len(observer.provisioned_seen),
        "instances rolled back": len(rolled_back),
        "tasks killed by crashes": adversary.killed,
        "restarts": len(world.incarnations) - 1,
        "terminations paid by a later process than owed them": sum(
            1 for iid, by in world.cloud.ended_by.items()
            if world.cloud.marked_by.get(iid, by) != by),
    })


def _checked(world: World, observer: Observer, result: SeedResult, final: bool,
             ignore: frozenset[str]) -> bool:
    found = [(inv, detail) for inv, detail in check(observer.state(final), final)
             if inv.name not in ignore]
    for inv, detail in found:
        result.breaks.append(Break(inv.name, inv.explanation, detail, world.step_no, final))
    return bool(found)


def _quiesce(world: World, adversary: Adversary, checked: Callable[[], bool]) -> bool:
    """No faults, a consistent cloud, everything run to completion, then a few rounds of
    time passing, kubelets joining, refreshes and controller passes. The per-step
    invariants are still checked after every switch; True if one broke."""
    world.log("--- quiescence ---")
    world.fake.clear_faults()
    world.cloud.lag = 0
    for zone in ("z-a", "z-b"):
        world.fake.set_stockout(Stockout(zone, "gpu8", CapacityType.ON_DEMAND), False)
    if drain(world, checked):
        return True
    for seconds in QUIET_SECONDS:
        world.clock.advance(seconds)
        world.log(f"kubelet.join: {adversary.kubelet_join(everyone=True)}")
        world.log(f"refresh: {adversary.refresh()}")
        if drain(world, checked):
            return True
        world.log(f"controller: {adversary.controller()}")
        if drain(world, checked):
            return True
    world.log(f"kubelet.join: {adversary.kubelet_join(everyone=True)}")
    world.log(f"controller: {adversary.controller()}")
    return drain(world, checked)


def drain(world: World, checked: Callable[[], bool]) -> bool:
    """Run tasks (in seeded order) until none is runnable; True if an invariant broke."""
    for _ in range(DRAIN_LIMIT):
        world.step_no += 1
        task = world.sched.step_random()
        if task is None:
            return False
        world.log(f"run {task.name} -> {'end' if task.done else task.at}")
        if checked():
            return True
    raise HarnessError(f"tasks still runnable after {DRAIN_LIMIT} switches: "
                       f"{[t.name for t in world.sched.runnable()]}")
