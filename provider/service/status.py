"""What allset holds now, as `allset status` shows it: each group (target, max, nodes by
source and state), each reservation (free, used and by whom), attempts in flight and the
last outcomes with their reasons, and the bookings of ProvisioningRequests. Built from the
provider's own state (no cloud call), as plain data for JSON and text."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from provider.app import Provider
from provider.attempts.executor import Outcome
from provider.base.words import counted

Status = dict[str, Any]


def status(provider: Provider) -> Status:
    bookings = provider.bookings()
    groups, users = [], defaultdict(list)
    for group in provider.fleet.groups():
        view = provider.fleet.view(group.id)
        sources: Counter[str] = Counter()
        states: Counter[str] = Counter()
        for node in view.nodes:
            states[node.state.value] += 1
            inst = node.instance
            if inst is None:
                sources["placeholder"] += 1
                continue
            sources[inst.tags.source.value] += 1
            if inst.tags.reservation:
                users[inst.tags.reservation].append(
                    inst.tags.request or f"Cluster Autoscaler ({inst.tags.attempt})")
        groups.append({"id": group.id, "target": view.target_size, "min": group.min_size,
                       "max": group.max_size, "nodes": len(view.nodes),
                       "sources": dict(sources), "states": dict(states)})
    reservations = [{"id": r.id, "zone": r.zone, "instanceType": r.instance_type,
                     "total": r.total, "free": r.free,
                     "usedBy": dict(Counter(users.get(r.id, [])))}
                    for r in provider.ledger.view().reservations]
    in_flight, _ = provider.executor.known()
    by_request: dict[str, int] = Counter(bookings.values())
    reserved, spend, teams = provider.fleet_figures()
    return {
        "acting": provider.acting(),
        # Which replica answered and which holds the lease (None without an election):
        # with two replicas, an operator must know whose view this is.
        "replica": getattr(provider.leadership, "identity", None),
        "leader": provider.leadership.holder,
        "notActingBecause": None if provider.acting() else provider.not_ready_reason(),
        "groups": groups,
        "reservations": reservations,
        "attemptsInFlight": sorted(in_flight),
        "lastOutcomes": [_outcome(o) for o in provider.recent.last()],
        "bookings": [{"request": r, "nodes": n} for r, n in sorted(by_request.items())],
        "reservedGpus": [{"zone": r.zone, "paid": r.paid, "up": r.up, "busy": r.busy}
                         for r in reserved],
        "spendPerHour": [{"source": src, "group": g, "usd": round(usd, 2)}
                         for (src, g), usd in sorted(spend.items())],
        "teamSpendPerHour": [{"namespace": ns, "queue": queue, "source": str(src),
                              "use": str(use), "nodes": t.nodes,
                              "usd": round(t.usd_per_hour, 2)}
                             for (ns, queue, src, use), t in sorted(teams.items())],
        "pendingByReason": dict(sorted(provider.pending_by_reason.items())),
        "gangApis": dict(sorted(provider.gang_apis.items())),
        "nodesReused": int(_total(provider, "allset_nodes_reused_total")),
        "scaleInSavedUsd": round(_total(provider, "allset_scale_in_saved_usd_total"), 2),
    }


def _total(provider: Provider, sample: str) -> float:
    """A counter's value summed over its labels, as the metrics endpoint shows it."""
    return sum(s.value for m in provider.metrics.registry.collect() for s in m.samples
               if s.name == sample)


def _outcome(o: Outcome) -> dict[str, Any]:
    reasons = [f"{r.code}: {r.message}" for r in o.infeasible.reasons] if o.infeasible else []
    reasons += [f"{f.part.group} ({f.part.reservation or f.part.capacity_type.value}): "
                f"{f.error}" for f in o.failures]
    reasons += [o.error] if o.error else []
    return {"attempt": o.attempt, "result": o.result.value, "nodes": len(o.instances),
            "rolledBack": o.rolled_back, "plans": o.plans_tried,
            "seconds": round(o.seconds, 1), "reasons": reasons}


def render(found: Status) -> str:
    """The text `allset status` prints."""
    lines = [f"acting: {'yes' if found['acting'] else 'no'}"
             + (f" ({found['notActingBecause']})" if found["notActingBecause"] else "")]
    if found.get("replica"):
        lines.append(f"replica: {found['replica']}, leader: {found.get('leader') or 'none'}")
    lines += ["",
             "GROUP                 TARGET  MIN  MAX  NODES BY SOURCE"]
    for g in found["groups"]:
        by = ", ".join(f"{k} {v}" for k, v in sorted(g["sources"].items())) or "-"
        lines.append(f"{g['id']:<20}  {g['target']:>6}  {g['min']:>3}  {g['max']:>3}  {by}")
    lines += ["", "RESERVATION           FREE/TOTAL  USED BY"]
    for r in found["reservations"]:
        used = ", ".join(f"{k} x{v}" for k, v in sorted(r["usedBy"].items())) or "-"
        lines.append(f"{r['id']:<20}  {r['free']:>4}/{r['total']:<5}  {used}")
    lines += ["", "ATTEMPTS IN FLIGHT: " + (", ".join(found["attemptsInFlight"]) or "none"),
              "", "LAST OUTCOMES"]
    for o in found["lastOutcomes"] or []:
        why = f" - {'; '.join(o['reasons'])}" if o["reasons"] else ""
        lines.append(f"{o['attempt']}  {o['result']}  {counted(o['nodes'], 'node')}, "
                     f"{o['rolledBack']} rolled back, {counted(o['plans'], 'plan')}, "
                     f"{o['seconds']}s{why}")
    if not found["lastOutcomes"]:
        lines.append("none yet")
    lines += ["", "BOOKINGS"]
    lines += [f"{b['request']}: {counted(b['nodes'], 'node')}"
              for b in found["bookings"]] or ["none"]
    lines += ["", "RESERVED GPUS  ZONE          PAID    UP  BUSY  UTILISATION"]
    for r in found["reservedGpus"]:
        used = f"{100 * r['busy'] / r['paid']:.0f}%" if r["paid"] else "-"
        lines.append(f"{'':<15}{r['zone']:<12}  {r['paid']:>4}  {r['up']:>4}  {r['busy']:>4}"
                     f"  {used}")
    if not found["reservedGpus"]:
        lines.append("none listed")
    spend = found["spendPerHour"]
    by_source: dict[str, float] = {}
    for row in spend:
        by_source[row["source"]] = by_source.get(row["source"], 0.0) + row["usd"]
    lines += ["", "SPEND OUTSIDE RESERVATIONS: " + (", ".join(
        f"{src} USD {usd:,.2f}/h" for src, usd in sorted(by_source.items())) or "none")]
    lines += _team_lines(found.get("teamSpendPerHour") or [])
    pending = found["pendingByReason"]
    lines += ["PENDING REQUESTS: " + (", ".join(f"{r} {n}" for r, n in pending.items())
                                      or "none")]
    apis = found.get("gangApis") or {}
    lines += ["GANG APIS: " + (", ".join(
        f"{api} {version or 'NOT SERVED (its gangs get no request)'}"
        for api, version in apis.items()) or "not looked at (no gang bridge)")]
    lines += [f"IDLE NODES REUSED: {found['nodesReused']}; SCALE-IN SAVED (estimate): "
              f"USD {found['scaleInSavedUsd']:,.2f}"]
    return "\n".join(lines)


def _team_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per namespace (team): nodes, USD per hour, and of that what its idle nodes cost."""
    teams: dict[str, list[float]] = {}
    for row in rows:
        figures = teams.setdefault(row["namespace"] or "(nobody)", [0, 0.0, 0.0])
        figures[0] += row["nodes"]
        figures[1] += row["usd"]
        figures[2] += row["usd"] if row["use"] == "idle" else 0.0
    lines = ["SPEND BY TEAM  NAMESPACE             NODES     USD/H  IDLE USD/H"]
    lines += [f"{'':<15}{team:<20}  {nodes:>5.0f}  {usd:>8,.2f}  {idle:>10,.2f}"
              for team, (nodes, usd, idle) in sorted(teams.items())] or ["none"]
    return lines
