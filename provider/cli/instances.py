"""`allset instances`: every instance the cloud has for this cluster, and what reconcile
would make of it."""

from __future__ import annotations

import argparse

from provider.cli.demo import config_or_demo


def instances(args: argparse.Namespace) -> int:
    import json

    from adapters.registry import connect
    from provider.attempts.reconcile import classify
    from provider.base.clock import SystemClock, rfc3339

    config = config_or_demo(args.config)
    adapter, config = connect(config, SystemClock())
    try:
        snapshot = adapter.snapshot(config.cluster)
    finally:
        adapter.close()
    found = classify(snapshot, in_flight=(), groups={g.id for g in config.groups})
    # Orphans: uncommitted attempts (rolled back after the grace period) and committed
    # instances of groups no longer configured (reported; see reconcile.unknownGroups).
    why = {i.id: "uncommitted" for i in (*found.orphans, *found.deleting)
           if not i.tags.committed}
    why.update({i.id: "group not configured" for i in found.unknown_group})
    rows = [i for i in snapshot.instances if not args.orphans or i.id in why]
    records = [{
        "id": i.id,
        "providerID": i.provider_id,
        "nodeGroup": i.tags.node_group,
        "attempt": i.tags.attempt,
        "part": i.tags.part,
        "source": str(i.tags.source),
        "reservation": i.tags.reservation,
        "request": i.tags.request,
        "state": str(i.state),
        # Reconcile finishes a commit that a crash interrupted: those count as committed.
        "committed": i.tags.committed or i in found.to_commit,
        "orphan": why.get(i.id),
        # A termination owed since then (the deletion mark): the leader terminates it.
        "deleting": rfc3339(i.tags.deleting_since) if i.tags.deleting_since is not None
        else None,
    } for i in sorted(rows, key=lambda i: (i.tags.node_group, i.tags.attempt, i.id))]
    if args.output == "json":
        print(json.dumps(records, indent=2))
        return 0
    header = ("INSTANCE", "GROUP", "ATTEMPT", "PART", "SOURCE", "RESERVATION", "STATE",
              "COMMITTED", "DELETING", "ORPHAN")
    table = [header] + [(r["id"], r["nodeGroup"], r["attempt"], r["part"], r["source"],
                         r["reservation"] or "-", r["state"], "yes" if r["committed"] else "no",
                         r["deleting"] or "-", r["orphan"] or "-")
                        for r in records]
    widths = [max(len(str(row[c])) for row in table) for c in range(len(header))]
    for row in table:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    if not records:
        print("(no orphans)" if args.orphans else "(no instances)")
    return 0
