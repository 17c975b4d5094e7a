"""What a job declares about its runtime, against what it really runs.

Users' estimates are noisy both ways, and some users give none. The model, stated once:
a share ``undeclared`` of jobs declares nothing; the others declare their real duration
times a log-normal factor exp(N(0, sigma)), kept within [1 / maxFactor, maxFactor]. The
median estimate is right (no bias: half the jobs run longer than they said, which is what
can interrupt them on a capacity block); sigma 0.3 puts about a third of the estimates
more than 30% off. A job may also state its declaration in the trace
(``expectedRuntime``), which is used as it is.

Each job's draw is seeded by the settings' seed and the job's name alone, so it does not
depend on the order of jobs, on the strategy or on anything else drawn in the run."""

from __future__ import annotations

import math
import random

from provider.sim.trace import JobSpec, RuntimeSettings


def declared_runtime(job: JobSpec, model: RuntimeSettings) -> float | None:
    """Seconds the job says it will run, or None if it says nothing."""
    if job.expected_runtime is not None:
        return job.expected_runtime
    rng = random.Random(f"runtime/{model.seed}/{job.name}")
    if rng.random() < model.undeclared:
        return None
    bound = math.log(model.max_factor)
    factor = math.exp(min(bound, max(-bound, rng.gauss(0.0, model.sigma))))
    return job.duration * factor
