"""Run the adversary (tests/adversary) over many seeds and print what it did and broke.

    python -m bench.adversary --seeds 10000 --jobs 2
    python -m bench.adversary --seeds 1 --start 4711 --verbose    # replay one seed

Each seed drives the real service (CA over gRPC, the ProvisioningRequest controller on
a Kubernetes API, the simulated cloud with faults, lag and crashes) through a random
interleaving and checks the invariants after every step and at quiescence. Prints seeds
run, steps, actions by kind, invariant breaks by invariant, seeds per second, and the
first failing seeds with the command that replays each. Exit status 1 if any broke.

String hashing is fixed (PYTHONHASHSEED=0, set by re-running itself) so that a seed
replays the same interleaving in any process."""

from __future__ import annotations

import argparse
import multiprocessing
import os
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
    report: str = ""


@dataclass
class Totals:
    seeds: int = 0
    steps: int = 0
    switches: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    reached: Counter[str] = field(default_factory=Counter)
    breaks: Counter[str] = field(default_factory=Counter)
    failing: list[Summary] = field(default_factory=list)

    def add(self, s: Summary) -> None:
        self.seeds += 1
        self.steps += s.steps
        self.switches += s.switches
        self.actions.update(s.actions)
        self.reached.update(s.reached)
        if s.broke:
            self.breaks.update(set(s.broke))
            self.failing.append(s)


def _one(job: tuple[int, int, tuple[str, ...]]) -> Summary:
    from tests.adversary.run import run_seed

    seed, steps, ignore = job
    r = run_seed(seed, steps, ignore)
    return Summary(seed, r.steps, r.switches, r.actions, r.reached,
                   tuple(b.invariant for b in r.breaks), "" if r.ok else r.report())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.adversary", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds")
    parser.add_argument("--start", type=int, default=0, help="first seed")
    parser.add_argument("--jobs", type=int, default=1, help="processes in parallel")
    parser.add_argument("--steps", type=int, default=0,
                        help="random steps per seed (default: the test's)")
    parser.add_argument("--ignore", default="",
                        help="comma-separated invariants not to check, e.g. I2")
    parser.add_argument("--verbose", action="store_true",
                        help="print the full report (breaks and step trace) of failing seeds")
    parser.add_argument("--show", type=int, default=5, help="failing seeds to list")
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != HASH_SEED:
        os.environ["PYTHONHASHSEED"] = HASH_SEED
        os.execv(sys.executable, [sys.executable, "-m", "bench.adversary", *sys.argv[1:]])

    from tests.adversary.run import STEPS, replay_command

    steps = args.steps or STEPS
    ignore = tuple(x.strip() for x in args.ignore.split(",") if x.strip())
    jobs = [(seed, steps, ignore) for seed in range(args.start, args.start + args.seeds)]
    totals = Totals()
    started = time.perf_counter()
    def add(summary: Summary) -> None:
        totals.add(summary)
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
          f"{steps} random steps each + quiescence)")
    print(f"steps:            {totals.steps} ({totals.switches} task switches)")
    print(f"time:             {elapsed:.1f} s, {totals.seeds / elapsed:.2f} seeds/s")
    print("actions by kind:  " + ", ".join(f"{k} {v}" for k, v in
                                           sorted(totals.actions.items())))
    print("reached:          " + ", ".join(f"{k} {v}" for k, v in
                                           sorted(totals.reached.items())))
    broke = ", ".join(f"{k} {v}" for k, v in sorted(totals.breaks.items())) or "none"
    print(f"invariant breaks: {len(totals.failing)} seeds ({broke})"
          + (f"; not checked: {', '.join(ignore)}" if ignore else ""))
    for s in totals.failing[:args.show]:
        if args.verbose:
            print()
            print(s.report)
        else:
            print(f"  seed {s.seed}: {', '.join(dict.fromkeys(s.broke))} -> "
                  f"{replay_command(s.seed, steps)}")
    return 1 if totals.failing else 0


if __name__ == "__main__":
    sys.exit(main())
