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

try:
    from provider.leadership import route as route_module
except ImportError:  # before CA's route was re-asserted (issue 31, finding 4)
    route_module = None  # type: ignore[assignment]
from provider.domain.cloud import CapacityType, InstanceState
from tests.adversary.actions import Adversary
from tests.adversary.election import WORLD_TIME
from tests.adversary.fixes import forced
from tests.adversary.invariants import check
from tests.adversary.observe import Observer
from tests.adversary.sched import HarnessError, yield_point
from tests.adversary.world import ALL_GROUPS, World, make_world

STEPS = 120
# Quiescence: rounds of (time passes, kubelets join, refresh, controller pass). Two
# rounds a grace period apart settle everything; a third checks that nothing moves.
QUIET_SECONDS = (1.0, 180.0, 180.0)
# With replicas, a deposed leader's attempts may still land until their deadline
# (attempts.deadline, 10 minutes): its successor leaves their instances alone until then,
# so one round waits that out (and a wall clock stepped back by a lease duration).
QUIET_SECONDS_REPLICAS = (1.0, 90.0, 180.0, 600.0 + 120.0, 180.0)
CUT_ROUND_SECONDS = 120.0  # a lease and a settle, and then some
PROBE_SECONDS = 30.0  # each of the reuse probe's two rounds
DRAIN_LIMIT = 20_000


@dataclass(frozen=True, slots=True)
class Break:
    invariant: str
    explanation: str
    detail: str
    step: int
    final: bool
    known: str | None = None  # why it is expected here: its fix is not in the tree


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
    replicas: bool = False
    solo: bool | None = None  # the world asked for (None: the seed picked)

    @property
    def ok(self) -> bool:
        return not self.failures

    @property
    def failures(self) -> list[Break]:
        return [b for b in self.breaks if b.known is None]

    @property
    def known(self) -> list[Break]:
        return [b for b in self.breaks if b.known is not None]

    def report(self, tail: int = 80) -> str:
        world = "replicas" if self.replicas else "one process"
        lines = [f"seed {self.seed} ({world}): {len(self.failures)} invariant breaks"
                 + (f", {len(self.known)} known" if self.known else "")]
        for b in self.breaks:
            where = "at quiescence" if b.final else f"after step {b.step}"
            known = f" [known: {b.known}]" if b.known else ""
            lines.append(f"  {b.invariant} ({b.explanation}) {where}{known}: {b.detail}")
        lines.append(f"last {min(tail, len(self.trace))} of {len(self.trace)} steps:")
        lines.extend("  " + t for t in self.trace[-tail:])
        lines.append(f"replay: {replay_command(self.seed, self.budget, self.solo)}")
        return "\n".join(lines)


def replay_command(seed: int, steps: int = STEPS, solo: bool | None = None) -> str:
    extra = f" --steps {steps}" if steps != STEPS else ""
    if solo is not None:
        extra += f" --world {'solo' if solo else 'replicas'}"
    if forced():
        extra += f" --force {','.join(sorted(forced()))}"
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
    # The Router times its retries on the time module's monotonic clock: the world's.
    real_time = getattr(route_module, "time", None)
    if real_time is not None:
        setattr(route_module, "time", WORLD_TIME)  # noqa: B010
    logging.disable(logging.CRITICAL)
    try:
        yield
    finally:
        if real_time is not None:
            setattr(route_module, "time", real_time)  # noqa: B010
        uuid.uuid4, failpoints.hit = real_uuid4, real_hit
        random.setstate(state)
        logging.disable(logging.NOTSET)


def run_seed(seed: int, steps: int = STEPS, ignore: Collection[str] = (),
             solo: bool | None = None) -> SeedResult:
    """Run one seed; invariants named in ``ignore`` are not checked (to look past a known
    break while its fix is on the way). ``solo``: one process, or replicas (None: the
    seed picks)."""
    result = SeedResult(seed, budget=steps, solo=solo)
    with _deterministic(seed):
        world = make_world(seed, solo)
        result.replicas = not world.solo
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
    if world.solo:
        state_dir = world.workdir / "state" if world.rng.random() < 0.5 else None
        world.boot(world.add_replica(state=False), ALL_GROUPS, state_dir)
        world.log(f"boot incarnation 1 {'with' if state_dir else 'without'} state dir")
    else:
        for _ in range(2):
            inc = world.boot(world.add_replica(state=world.rng.random() < 0.5), ALL_GROUPS)
            world.log(f"boot replica {inc.replica.name} ({inc.tag}) "
                      f"{'with' if inc.state_dir else 'without'} state dir")
    def checked() -> bool:
        return _checked(world, observer, result, False, ignore)

    world.after_switch = checked
    for _ in range(steps):
        adversary.step()
        if result.failures or checked():
            break
    result.steps = world.step_no
    result.actions = adversary.counts
    if result.failures:
        return

    if not _quiesce(world, adversary, checked):
        _checked(world, observer, result, True, ignore)
    result.reached = _reached(world, observer, adversary)


def _reached(world: World, observer: Observer, adversary: Adversary) -> Counter[str]:
    """How far the seed got: evidence that the moves reach the states that matter."""
    instances = world.fake.all_instances()
    committed = {i.tags.attempt for i in instances if i.tags.committed}
    rolled_back = [i for i in instances
                   if not i.tags.committed and i.state is InstanceState.TERMINATED]
    out = Counter({
        "gangs committed": len(committed),
        "requests Provisioned": len(observer.provisioned_seen),
        "instances rolled back": len(rolled_back),
        "stopped gang nodes deleted": sum(
            1 for i in instances if i.id in world.stopped and i.tags.request is not None
            and i.tags.committed and i.state is InstanceState.TERMINATED),
        "tasks killed by crashes": adversary.killed,
        "restarts": len(world.incarnations) - len(world.replicas),
        "terminations paid by a later process than owed them": sum(
            1 for iid, by in world.cloud.ended_by.items()
            if world.cloud.marked_by.get(iid, by) != by),
        # Issue 52: the block's end ended what ran in it; launches the cloud refused for
        # want of room (each sent again: N1).
        "instances ended by their capacity's end": sum(
            1 for i in instances if i.id in world.cloud.cloud_ended
            and i.id not in world.cloud.reclaimed),
        "launches refused for room": world.cloud.refused_for_room,
    })
    out["hostile requests refused (standing at the end)"] = adversary.hostile.refused()
    out.update(adversary.coverage)
    out.update(observer.reached())
    return +out


def _checked(world: World, observer: Observer, result: SeedResult, final: bool,
             ignore: frozenset[str]) -> bool:
    """Check every invariant; True if one broke (a known break is recorded once per
    invariant and the seed goes on)."""
    seen = {b.invariant for b in result.known}
    failed = False
    for inv, detail in check(observer.state(final), final):
        if inv.name in ignore:
            continue
        known = inv.known
        if known is not None and inv.name in seen:
            continue
        seen.add(inv.name)
        result.breaks.append(Break(inv.name, inv.explanation, detail, world.step_no, final,
                                   known))
        failed = failed or known is None
    return failed


def _quiesce(world: World, adversary: Adversary, checked: Callable[[], bool]) -> bool:
    """No faults, a consistent cloud, no partition, every replica running (the kubelet
    restarts a dead container), everything run to completion, then a few rounds of time
    passing, kubelets joining, refreshes and controller passes (in every process). The
    per-step invariants are still checked after every switch; True if one broke."""
    world.log("--- quiescence ---")
    world.fake.clear_faults()
    world.cloud.lag = 0
    for zone in ("z-a", "z-b"):
        world.fake.set_stockout(Stockout(zone, "gpu8", CapacityType.ON_DEMAND), False)
    if not world.solo:
        cut = [r for r in world.replicas if r.kube.partition]
        if cut and world.rng.random() < 0.5:
            # Half the time one cut replica (one holding writes, if any) stays cut while
            # the others, healed, go on (the standby takes over and acts), and its held
            # requests land or drop only after that.
            writing = [r for r in cut if any(h.method != "GET" for h in r.kube.held)]
            kept = world.rng.choice(writing or cut)
            for r in world.replicas:
                r.cloud.partition = None
                if r is not kept and r.kube.partition:
                    r.kube.heal(world.rng.random() < 0.6)
            world.log(f"{kept.name} stays cut off from the API server for a round")
            if _round(world, adversary, checked, CUT_ROUND_SECONDS):
                return True
        world.log(f"heal: {adversary.heal(everything=True)}")
        for replica in world.standing():
            inc = replica.current
            if inc is None or not inc.alive:
                world.log(f"restart: {world.boot(replica).tag}")
    if drain(world, checked):
        return True
    for n, seconds in enumerate(QUIET_SECONDS if world.solo else QUIET_SECONDS_REPLICAS):
        if _round(world, adversary, checked, seconds):
            return True
        if n == 1:  # warm nodes abound by now: the later rounds must release a stopped one
            world.log(f"cloud.stop: {adversary.stop_warm()}")
    # Issue 50's probe: an idle node made by CA, tainted by someone (most often), and a
    # request that would book it; its rounds plan it (I14, I15).
    world.log(f"probe: {adversary.probe_prepare()}")
    for prepared in (True, False):
        if _round(world, adversary, checked, PROBE_SECONDS):
            return True
        if prepared:
            world.log(f"probe: {adversary.probe_reuse()}")
    world.log(f"kubelet.join: {adversary.kubelet_join(everyone=True)}")
    for inc in world.alive():
        world.log(f"controller: {adversary.controller(inc)}")
    return drain(world, checked) or _launches_land(world, adversary, checked)


# A launch takes the cloud's latency (world.py: launchLatencySeconds) of the world's time.
LAUNCH_WAIT_SECONDS = 5.0


def _launches_land(world: World, adversary: Adversary, checked: Callable[[], bool]) -> bool:
    """An attempt the last controller pass started may be in the cloud still: a launch
    waits for the world's time to pass, which a drain does not move (while a part waiting
    for room moved it, and a sibling's launch landed). Quiescence is once they have
    landed: time passes a launch's latency at a time until none waits. Time that passed
    may have changed the cloud by itself (a capacity block's end terminates its
    instances: CI seed 123), which a process sees at its next listing: then kubelets join
    and every process refreshes once more, as a round ends, before the last look."""
    waited = False
    for _ in range(20):
        if not any(t.at == "cloud.busy" and not t.done for t in world.sched.tasks):
            break
        world.advance(LAUNCH_WAIT_SECONDS)
        waited = True
        world.log(f"+{LAUNCH_WAIT_SECONDS:.0f}s for launches in the cloud")
        if drain(world, checked):
            return True
    if not waited:
        return False
    world.log(f"kubelet.join: {adversary.kubelet_join(everyone=True)}")
    for inc in world.alive():
        world.log(f"refresh: {adversary.refresh(inc)}")
    return drain(world, checked)


def _round(world: World, adversary: Adversary, checked: Callable[[], bool],
           seconds: float) -> bool:
    """Time passes, kubelets join, then a refresh and a controller pass in every process
    (each drained). True if an invariant broke."""
    world.advance(seconds)
    world.log(f"+{seconds:.0f}s; kubelet.join: {adversary.kubelet_join(everyone=True)}")
    for inc in world.alive():
        world.log(f"refresh: {adversary.refresh(inc)}")
    if drain(world, checked):
        return True
    for inc in world.alive():
        world.log(f"controller: {adversary.controller(inc)}")
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
