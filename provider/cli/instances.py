"""`allset instances`: every instance the cloud has for this cluster, and what reconcile
would make of it; from this command's own listing, or from a running allset (--server)."""

from __future__ import annotations

import argparse
import sys

from provider.cli.demo import config_or_demo
from provider.cli.errors import UsageError

# The simulated cloud without a statePath lives in one process's memory: this command's
# would be empty however many instances a running allset has launched.
PRIVATE_SIMULATION = ("# this is the simulated cloud of this command alone (no "
                      "cloud.fake.statePath): a running allset's instances are not in it; "
                      "ask it with --server ADDR")


def instances(args: argparse.Namespace) -> int:
    import json

    from provider.service.inventory import render

    found = _from_server(args) if args.server else _from_cloud(args)
    if args.output == "json":
        print(json.dumps(found, indent=2))
    else:
        print(render(found, orphans_only=args.orphans))
    return 0


def _from_cloud(args: argparse.Namespace) -> list[dict[str, object]]:
    from adapters.registry import connect
    from provider.base.clock import SystemClock
    from provider.service.inventory import records

    config = config_or_demo(args.config)
    cloud = config.schema.cloud
    if cloud.provider == "fake" and (cloud.fake is None or cloud.fake.state_path is None) \
            and args.output == "text":  # JSON is for scripts: they read stdout alone
        print(PRIVATE_SIMULATION, file=sys.stderr)
    adapter, config = connect(config, SystemClock())
    try:
        snapshot = adapter.snapshot(config.cluster)
    finally:
        adapter.close()
    return records(snapshot, {g.id for g in config.groups}, orphans_only=args.orphans)


def _from_server(args: argparse.Namespace) -> list[dict[str, object]]:
    import json

    from provider.cli.admin import admin_call, server_address

    if args.config is not None:
        raise UsageError("--config and --server: one of them (--server asks the running "
                         "allset, which has its own config)")
    server_address(args.server)  # before gRPC is imported
    from provider.service.admin import INSTANCES_METHOD

    body = json.dumps({"orphans": bool(args.orphans)}).encode()
    found: list[dict[str, object]] = json.loads(admin_call(args, INSTANCES_METHOD, body))
    return found
