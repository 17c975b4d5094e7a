"""GPU-hours and money, integrated exactly over piecewise-constant fleet states.

Every node is in one state at a time: booting (launched, not running yet; or running, held
for a gang that has all its nodes and waits for the slowest to boot), busy (its gang is
running), stranded (running, held for a gang that lacks nodes) or idle (running, held by no
gang: waiting for scale-down). "Up" is running: busy + stranded +
idle. Billing runs from launch to termination, so billed = booting + up; a node is billed
on demand unless it sits in a reservation (already paid)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class State(enum.StrEnum):
    BOOTING = "booting"
    BUSY = "busy"
    STRANDED = "stranded"
    IDLE = "idle"


@dataclass(frozen=True, slots=True)
class Sample:
    """The fleet at one moment (GPUs), and money spent so far."""

    hours: float
    gpus: dict[str, int]  # state -> GPUs
    on_demand_gpus: int
    reserved_gpus: int
    pending_jobs: int
    on_demand_cost: float


@dataclass(slots=True)
class Accounting:
    start: float
    sample_every: float
    gpu_seconds: dict[State, float] = field(default_factory=lambda: dict.fromkeys(State, 0.0))
    on_demand_gpu_seconds: float = 0.0  # billing's own view: checks the states' sum
    reserved_gpu_seconds: float = 0.0
    reserved_node_seconds: float = 0.0
    cost: float = 0.0  # USD
    samples: list[Sample] = field(default_factory=list)
    # current rates
    _gpus: dict[State, int] = field(default_factory=lambda: dict.fromkeys(State, 0))
    _od_gpus: int = 0
    _od_rate: float = 0.0  # USD per hour
    _res_nodes: int = 0
    _res_gpus: int = 0
    _pending: int = 0
    _at: float = 0.0
    _next_sample: float = 0.0

    def __post_init__(self) -> None:
        self._at = self.start
        self._next_sample = self.start

    def advance(self, now: float) -> None:
        """Integrate the current rates up to ``now``, sampling on the way."""
        while self._next_sample <= now:
            self._integrate(self._next_sample)
            self.samples.append(self._sample())
            self._next_sample += self.sample_every
        self._integrate(now)

    def _integrate(self, t: float) -> None:
        dt = t - self._at
        if dt <= 0:
            return
        for s, n in self._gpus.items():
            self.gpu_seconds[s] += n * dt
        self.on_demand_gpu_seconds += self._od_gpus * dt
        self.reserved_gpu_seconds += self._res_gpus * dt
        self.reserved_node_seconds += self._res_nodes * dt
        self.cost += self._od_rate * dt / 3600
        self._at = t

    def _sample(self) -> Sample:
        return Sample(
            hours=(self._at - self.start) / 3600,
            gpus={str(s): n for s, n in self._gpus.items()},
            on_demand_gpus=self._od_gpus,
            reserved_gpus=self._res_gpus,
            pending_jobs=self._pending,
            on_demand_cost=self.cost,
        )

    # --- changes (the caller advances to the current time first) ------------------------

    def move(self, gpus: int, old: State | None, new: State | None) -> None:
        if old is not None:
            self._gpus[old] -= gpus
        if new is not None:
            self._gpus[new] += gpus

    def bill(self, gpus: int, reserved: bool, price: float, sign: int) -> None:
        """Start (sign 1) or stop (-1) billing a node."""
        if reserved:
            self._res_nodes += sign
            self._res_gpus += sign * gpus
        else:
            self._od_gpus += sign * gpus
            self._od_rate += sign * price

    def pending(self, delta: int) -> None:
        self._pending += delta

    def current(self, state: State) -> int:
        return self._gpus[state]
