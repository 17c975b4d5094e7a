"""Run the adversary (tests/adversary) over many seeds and print what it did and broke.

    python -m bench.adversary --seeds 10000 --jobs 2              # seeds drawn for the run
    python -m bench.adversary --seeds 1 --start 4711 --verbose    # replay one seed

Each seed drives the real service (CA over gRPC, the ProvisioningRequest controller on
a Kubernetes API, the simulated cloud with faults, lag and crashes) through a random
interleaving and checks the invariants after every step and at quiescence. Three seeds
in four run two replicas (elected on a Lease, routed by the leader's EndpointSlice, cut
off from the API server or the cloud, wall clocks stepped, killed, rolled), the fourth one
process that crashes; in each, controller workers run requests at once, requests wait for
a capacity block's window, and the gang bridge meets PodGroups of three APIs. Prints seeds
run, steps, actions by kind, what every world reached (requests' attempts at once, holds
and windows, pods of two gang APIs asked for), the coverage the replicas reached
(failovers, partitions healed each way, clock steps, late writes refused, gangs committed
under each lease epoch, terminations finished by another process), invariant breaks by
invariant (and known ones: a check whose fix is not in the tree yet), seeds per
second, and the first failing seeds with the command that replays each. Exit status 1 if
any broke.

String hashing is fixed (PYTHONHASHSEED=0, set by re-running itself) so that a seed
replays the same interleaving in any process."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

HASH_SEED = "0"


@dataclass
class Summary:
    seed: int
    steps: int
    switches: int
    actions: Counter[str]
    reached: Counter[str]
    broke: tuple[str, ...]  # invariants broken (first failing step)
    known: tuple[str, ...]  # known breaks (their fix is not in the tree)
    replicas: bool
    report: str = ""


@dataclass
class Totals:
    seeds: int = 0
    steps: int = 0
    switches: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    reached: Counter[str] = field(default_factory=Counter)
    breaks: Counter[str] = field(default_factory=Counter)
    known: Counter[str] = field(default_factory=Counter)
    known_seeds: list[Summary] = field(default_factory=list)
    replica_seeds: int = 0
    failing: list[Summary] = field(default_factory=list)

    def add(self, s: Summary) -> None:
        self.seeds += 1
        self.replica_seeds += s.replicas
        if s.known:
            self.known.update(set(s.known))
            self.known_seeds.append(s)
        self.steps += s.steps
        self.switches += s.switches
        self.actions.update(s.actions)
        self.reached.update(s.reached)
        if s.broke:
            self.breaks.update(set(s.broke))
            self.failing.append(s)


# The replicas' coverage, in the order it is printed (the rest follows, sorted).
COVERAGE = (
    "failovers",
    "leaders killed",
    "rolling updates (SIGTERM)",
    "rolling updates (SIGKILL)",
    "API partitions healed, held requests landing late",
    "API partitions healed, held requests dropped",
    "held requests landed after the caller gave up",
    "request writes of a deposed leader held to the heal",
    "API blips (a read held past the renew deadline)",
    "cloud partitions (hang)",
    "wall-clock steps forward",
    "wall-clock steps back",
    "late writes refused at the fence",
    "cloud actions refused at the fence",
    "late writes refused by the server (409)",
    "attempt records changed by a deposed leader's late write",
    "gangs committed in lease epoch 0",
    "gangs committed in lease epoch 1",
    "gangs committed in lease epoch 2",
    "gangs committed in lease epoch 3+",
    "terminations paid by a later process than owed them",
)
WORLD = {"mixed": None, "solo": True, "replicas": False}


def _one(job: tuple[int, int, tuple[str, ...], bool | None]) -> Summary:
    from tests.adversary.run import run_seed

    seed, steps, ignore, solo = job
    r = run_seed(seed, steps, ignore, solo)
    return Summary(seed, r.steps, r.switches, r.actions, r.reached,
                   tuple(b.invariant for b in r.failures),
                   tuple(b.invariant for b in r.known), r.replicas,
                   "" if r.ok and not r.known else r.report())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.adversary", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds")
    parser.add_argument("--start", type=int, default=None,
                        help="first seed (default: drawn for this run, so that passing is "
                        "never tuned to a known set of seeds; printed for replay)")
    parser.add_argument("--jobs", type=int, default=1, help="processes in parallel")
    parser.add_argument("--steps", type=int, default=0,
                        help="random steps per seed (default: the test's)")
    parser.add_argument("--ignore", default="",
                        help="comma-separated invariants not to check, e.g. I2")
    parser.add_argument("--verbose", action="store_true",
                        help="print the full report (breaks and step trace) of failing seeds")
    parser.add_argument("--show", type=int, default=5, help="failing seeds to list")
    parser.add_argument("--world", choices=sorted(WORLD), default="mixed",
                        help="replicas, one process (solo), or as each seed picks (mixed)")
    parser.add_argument("--force", default="",
                        help="moves to make although their fix is not in the tree, e.g. "
                        "clock.step (comma-separated; the children inherit it)")
    args = parser.parse_args(argv)
    if args.force:
        os.environ["ALLSET_ADVERSARY_FORCE"] = args.force
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        os.environ["PYTHONHASHSEED"] = HASH_SEED
        os.execv(sys.executable, [sys.executable, "-m", "bench.adversary", *sys.argv[1:]])

    from tests.adversary.run import STEPS, replay_command

    if args.start is None:
        # Above the CI test's seeds (0-199) and every range a run of ours was told to use.
        args.start = random.SystemRandom().randrange(10**6, 10**9)
        print(f"seeds drawn for this run: {args.start} .. {args.start + args.seeds - 1}",
              file=sys.stderr, flush=True)
    steps = args.steps or STEPS
    ignore = tuple(x.strip() for x in args.ignore.split(",") if x.strip())
    solo = WORLD[args.world]
    jobs = [(seed, steps, ignore, solo)
            for seed in range(args.start, args.start + args.seeds)]
    totals = Totals()
    started = time.perf_counter()
    def add(summary: Summary) -> None:
        totals.add(summary)
        if summary.broke:  # said at once: a long run's first break is worth a look now
            print(f"... seed {summary.seed} broke: {', '.join(dict.fromkeys(summary.broke))}",
                  file=sys.stderr, flush=True)
        if totals.seeds % 500 == 0:  # a long run says how far it is
            print(f"... {totals.seeds}/{args.seeds} seeds, {len(totals.failing)} broke, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)

    if args.jobs > 1:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(args.jobs) as pool:
            for summary in pool.imap_unordered(_one, jobs, chunksize=4):
                add(summary)
    else:
        for job in jobs:
            add(_one(job))
    elapsed = time.perf_counter() - started
    totals.failing.sort(key=lambda s: s.seed)

    print(f"seeds run:        {totals.seeds} (from {args.start}, {args.jobs} processes, "
          f"{steps} random steps each + quiescence; {totals.replica_seeds} with replicas)")
    print(f"steps:            {totals.steps} ({totals.switches} task switches)")
    print(f"time:             {elapsed:.1f} s, {totals.seeds / elapsed:.2f} seeds/s")
    print("actions by kind:  " + ", ".join(f"{k} {v}" for k, v in
                                           sorted(totals.actions.items())))
    rest = {k: v for k, v in totals.reached.items() if k not in COVERAGE}
    print("reached:          " + ", ".join(f"{k} {v}" for k, v in sorted(rest.items())))
    if totals.replica_seeds:
        print("replicas reached: " + ", ".join(f"{k} {totals.reached[k]}" for k in COVERAGE))
    broke = ", ".join(f"{k} {v}" for k, v in sorted(totals.breaks.items())) or "none"
    print(f"invariant breaks: {len(totals.failing)} seeds ({broke})"
          + (f"; not checked: {', '.join(ignore)}" if ignore else ""))
    if totals.known:
        known = ", ".join(f"{k} {v}" for k, v in sorted(totals.known.items()))
        first = sorted(s.seed for s in totals.known_seeds)[:5]
        print(f"known breaks:     {len(totals.known_seeds)} seeds ({known}): their fix is "
              f"not in this tree; e.g. seeds {', '.join(map(str, first))}")
    shown = totals.failing or (sorted(totals.known_seeds, key=lambda s: s.seed)
                               if args.verbose else [])
    for s in shown[:args.show]:
        if args.verbose:
            print()
            print(s.report)
        else:
            print(f"  seed {s.seed}: {', '.join(dict.fromkeys(s.broke))} -> "
                  f"{replay_command(s.seed, steps, solo)}")
    return 1 if totals.failing else 0


if __name__ == "__main__":
    sys.exit(main())
