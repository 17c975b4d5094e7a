"""A simulation trace: the fleet (shapes, node groups, reservations, quotas), on-demand
stockouts that come and go, and the gang jobs that arrive. YAML or JSON, camelCase keys,
unknown keys refused; every error names the file and the field.

Times are seconds from the start of the simulation, as numbers or durations ("90s",
"4h", "2d12h")."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator, Field, ValidationError, model_validator

from provider.config import ConfigError
from provider.config.base import Model
from provider.config.files import TRACE_LIMIT, read_text
from provider.config.paths import field_path, plain_message
from provider.config.schema import Name
from provider.config.units import duration_seconds
from provider.domain.cloud import ReservationKind
from provider.domain.demand import Topology

_DAYS = re.compile(r"^(?P<days>\d+(?:\.\d+)?)d(?P<rest>.*)$")


def seconds(value: Any) -> float:
    """A number of seconds, or a duration with an optional leading day count ("2d12h")."""
    if isinstance(value, str):
        text = value.strip()
        match = _DAYS.match(text)
        if match:
            rest = match.group("rest")
            return float(match.group("days")) * 86400 + (duration_seconds(rest) if rest else 0)
        return duration_seconds(text)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("expected seconds or a duration such as 90s, 4h or 2d")
    return duration_seconds(value)


Seconds = Annotated[float, BeforeValidator(seconds)]


class ShapeSpec(Model):
    """One instance type: what a node offers and costs."""

    instance_type: str = Field(min_length=1)
    gpu_type: str | None = None
    gpus: int = Field(0, ge=0, description="GPUs per node")
    cpu: int = Field(32, gt=0, description="allocatable vCPUs")
    memory_gib: int = Field(128, gt=0)
    on_demand_price: float = Field(ge=0, description="USD per node-hour")

    @model_validator(mode="after")
    def _gpu(self) -> ShapeSpec:
        if self.gpus and not self.gpu_type:
            raise ValueError("gpus is set but gpuType is not")
        return self


class GroupSpec(Model):
    id: Name
    shape: str
    zone: str = Field(min_length=1)
    fabric: Name | None = None
    max_size: int = Field(ge=0)
    reservations: list[str] = Field(default_factory=list,
                                    description="targeted reservations the group may use")


class ReservationSpec(Model):
    id: str = Field(min_length=1)
    shape: str
    zone: str = Field(min_length=1)
    count: int = Field(gt=0)
    fabric: Name | None = None
    kind: ReservationKind = ReservationKind.DEFAULT
    targeted: bool = False
    start: Seconds = 0.0
    end: Seconds | None = None
    price: float | None = Field(
        None, ge=0, description="USD per node-hour the reservation costs over its window, "
        "used or not; default: the shape's onDemandPrice (what an ODCR or a Compute Engine "
        "reservation bills). Only the total-cost figures read it")

    @model_validator(mode="after")
    def _window(self) -> ReservationSpec:
        if self.kind is ReservationKind.CAPACITY_BLOCK and self.end is None:
            raise ValueError("a capacity block needs an end")
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"end ({self.end:g}s) must be after start ({self.start:g}s)")
        return self

    @property
    def is_targeted(self) -> bool:
        """Capacity blocks only serve launches that name them."""
        return self.targeted or self.kind is ReservationKind.CAPACITY_BLOCK


class StockoutSpec(Model):
    """On-demand capacity of one shape in one zone is gone from start to end."""

    shape: str
    zone: str = Field(min_length=1)
    start: Seconds = 0.0
    end: Seconds | None = None

    @model_validator(mode="after")
    def _window(self) -> StockoutSpec:
        if self.end is not None and self.end <= self.start:
            raise ValueError(f"end ({self.end:g}s) must be after start ({self.start:g}s)")
        return self


class QuotaSpec(Model):
    """An account limit on on-demand GPUs (all shapes and zones unless narrowed)."""

    name: str = Field(min_length=1)
    gpus: int = Field(ge=0)
    shapes: list[str] = Field(default_factory=list)
    zones: list[str] = Field(default_factory=list)


class PodSetSpec(Model):
    """``nodes`` pods, each taking a whole node of ``shape``."""

    shape: str
    nodes: int = Field(ge=1, le=64)


class JobSpec(Model):
    name: str = Field(min_length=1)
    arrival: Seconds
    duration: Seconds
    expected_runtime: Seconds | None = Field(
        None, description="what the job declares (expectedRuntimeSeconds); default: drawn "
        "by settings.runtimes from its duration")
    topology: Topology = Topology.ZONE
    pod_sets: list[PodSetSpec] = Field(min_length=1, max_length=8)

    @model_validator(mode="after")
    def _checks(self) -> JobSpec:
        if self.duration <= 0:
            raise ValueError("duration must be positive")
        if self.expected_runtime is not None and self.expected_runtime <= 0:
            raise ValueError("expectedRuntime must be positive")
        shapes = [p.shape for p in self.pod_sets]
        if len(set(shapes)) != len(shapes):
            raise ValueError("podSets name a shape twice; merge them")
        return self

    @property
    def nodes(self) -> int:
        return sum(p.nodes for p in self.pod_sets)


class RuntimeSettings(Model):
    """What jobs declare about how long they run (provider/sim/runtimes.py), and how long
    they may wait for reserved capacity that has not opened yet."""

    declared: bool = Field(True, description="allset is told each job's declared runtime "
                           "and deadline; false: today's allset, which knows neither")
    sigma: float = Field(0.3, ge=0, le=2, description="declared = duration x lognormal(0, "
                         "sigma): the spread of users' estimates")
    max_factor: float = Field(3.0, ge=1, description="declared stays within duration / "
                              "maxFactor and duration x maxFactor")
    undeclared: float = Field(0.1, ge=0, le=1, description="share of jobs that declare "
                              "nothing")
    max_wait: Seconds = Field(14400.0, description="maxWaitSeconds of every job: how long "
                              "after arrival it may wait for a window")
    seed: int = 0
    # allset's own guard (config `runtimes`), used only when runtimes are declared: what
    # an operator who knows its users' estimates are off by up to 3x would set.
    margin: float = Field(1.5, ge=1, description="allset's runtimes.margin")
    assume_undeclared: Seconds | None = Field(86400.0, description="allset's "
                                              "runtimes.undeclared")


class Settings(Model):
    horizon: Seconds | None = Field(None, description="default: the last arrival")
    drain: Seconds = Field(172800.0, description="time after the horizon for jobs to finish")
    boot_seconds: Seconds = Field(300.0, description="launch call to a running node: the "
                                  "median; each node draws its own (bootSpread)")
    boot_spread: float = Field(0.2, ge=0, le=1, description="a node boots in bootSeconds x "
                               "lognormal(0, bootSpread), drawn from the run's seed; 0: "
                               "every node takes exactly bootSeconds")
    boot_max_factor: float = Field(2.0, ge=1, description="a node's boot time stays within "
                                   "bootSeconds / bootMaxFactor and bootSeconds x "
                                   "bootMaxFactor")
    failure_reported: Seconds = Field(30.0, description="baselines: a resize returns at once; "
                                      "the cloud records its launch failure this long after "
                                      "(CA sees it at its next cloud refresh)")
    min_billed_seconds: Seconds = Field(60.0, description="an on-demand node is billed at "
                                        "least this long (AWS Linux, GCE: 1 minute)")
    scale_down_delay: Seconds = Field(600.0, description="an empty node is removed after this")
    gang_timeout: Seconds = Field(1200.0, description="baselines: a gang not running this long "
                                  "after admission is evicted and requeued")
    requeue_delay: Seconds = Field(60.0, description="an evicted gang is requeued after this")
    scale_down_delay_after_add: Seconds = Field(
        600.0, description="baselines: CA's --scale-down-delay-after-add (10 min by default "
        "in 1.31 and 1.36)")
    scale_down_delay_type_local: bool = Field(
        True, description="baselines: CA's --scale-down-delay-type-local; true: the delay "
        "holds only the node group that scaled up, false (CA's default): every group")
    ca_loop: Seconds = Field(10.0, description="Cluster Autoscaler's scan interval")
    sample_interval: Seconds = Field(3600.0, description="time-series step for the plot")
    runtimes: RuntimeSettings = RuntimeSettings()


class TraceModel(Model):
    shapes: dict[str, ShapeSpec] = Field(min_length=1)
    groups: list[GroupSpec] = Field(min_length=1)
    reservations: list[ReservationSpec] = Field(default_factory=list)
    stockouts: list[StockoutSpec] = Field(default_factory=list)
    quotas: list[QuotaSpec] = Field(default_factory=list)
    jobs: list[JobSpec] = Field(default_factory=list)
    settings: Settings = Settings()


Problems = list[tuple[str, str]]


def _references(t: TraceModel) -> Problems:
    """What one section names must exist in another."""
    problems: Problems = []

    def shape(where: str, name: str) -> None:
        if name not in t.shapes:
            problems.append((where, f"unknown shape {name!r}; shapes: "
                             + ", ".join(sorted(t.shapes))))

    def unique(section: str, ids: list[str]) -> None:
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            problems.append((section, "ids must be unique; repeated: " + ", ".join(dupes)))

    unique("groups", [g.id for g in t.groups])
    unique("reservations", [r.id for r in t.reservations])
    unique("jobs", [j.name for j in t.jobs])
    reservations = {r.id: r for r in t.reservations}
    for i, g in enumerate(t.groups):
        shape(f"groups[{i}] (id {g.id}).shape", g.shape)
        for k, rid in enumerate(g.reservations):
            if rid not in reservations:
                problems.append((f"groups[{i}] (id {g.id}).reservations[{k}]",
                                 f"unknown reservation {rid!r}"))
    for i, r in enumerate(t.reservations):
        shape(f"reservations[{i}] (id {r.id}).shape", r.shape)
    for i, s in enumerate(t.stockouts):
        shape(f"stockouts[{i}].shape", s.shape)
    for i, q in enumerate(t.quotas):
        for k, name in enumerate(q.shapes):
            shape(f"quotas[{i}].shapes[{k}]", name)
    served = {g.shape for g in t.groups}
    for i, j in enumerate(t.jobs):
        for k, p in enumerate(j.pod_sets):
            where = f"jobs[{i}] (name {j.name}).podSets[{k}].shape"
            if p.shape not in t.shapes:
                shape(where, p.shape)
            elif p.shape not in served:
                problems.append((where, f"no group runs shape {p.shape!r}"))
    return problems


def parse_trace(raw: Any, source: str) -> TraceModel:
    if not isinstance(raw, dict):
        raise ConfigError(source, [("", "a trace must be a mapping at the top level")])
    try:
        trace = TraceModel.model_validate(raw)
    except ValidationError as err:
        raise ConfigError(source, [(field_path(e["loc"], raw), plain_message(e))
                                   for e in err.errors(include_url=False)]) from None
    problems = _references(trace)
    if problems:
        raise ConfigError(source, problems)
    return trace


def load_trace(path: str | Path) -> TraceModel:
    """Read a trace file (JSON if it ends in .json, else YAML)."""
    source = str(path)
    text = read_text(path, "trace", TRACE_LIMIT)
    try:
        raw = json.loads(text) if source.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        kind = "JSON" if source.endswith(".json") else "YAML"
        raise ConfigError(source, [("", f"not valid {kind}: {err}")]) from err
    return parse_trace(raw, source)


def dump_trace(trace: TraceModel) -> str:
    """YAML with one line per job, reservation and stockout (readable, diffable)."""
    data = trace.model_dump(mode="json", by_alias=True, exclude_none=True)
    lines = []
    for key in ("shapes", "groups", "reservations", "stockouts", "quotas", "settings"):
        value = data.get(key)
        if not value:
            continue
        if isinstance(value, dict) and key == "shapes":
            lines.append("shapes:")
            for name, shape in value.items():
                lines.append(f"  {name}: {_flow(shape)}")
        elif isinstance(value, dict):
            lines.append(f"{key}: {_flow(value)}")
        else:
            lines.append(f"{key}:")
            lines.extend(f"  - {_flow(item)}" for item in value)
    lines.append("jobs:")
    lines.extend(f"  - {_flow(j)}" for j in data["jobs"])
    return "\n".join(lines) + "\n"


def _flow(value: Any) -> str:
    return yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()


