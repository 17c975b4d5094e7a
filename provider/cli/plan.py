"""`allset plan`: a ProvisioningRequest planned against a fresh listing of the cloud, or
inside a running allset against its live view."""

from __future__ import annotations

import argparse

from provider.base.yaml_errors import yaml_problem
from provider.cli.admin import admin_call, server_address
from provider.cli.errors import UsageError
from provider.cli.request_fields import refuse_unknown_fields
from provider.config import ConfigError, load_config


def plan(args: argparse.Namespace) -> int:
    """Exit 0 with a plan, 2 when no plan exists, 1 on bad input."""
    import json

    import yaml

    from adapters.registry import connect
    from provider.base.clock import SystemClock
    from provider.capacity.ledger import Ledger
    from provider.capacity.unavailable import UnavailableOfferings
    from provider.config.files import read_text
    from provider.config.schema import queue_problem
    from provider.domain.plan import Infeasible
    from provider.domain.provreq import BadRequest, demand_from, split_documents
    from provider.planner.answer import plan
    from provider.planner.matching import Matcher
    from provider.planner.render import plan_json, plan_text, timing_json, timing_text
    from provider.planner.timing import wait_or_buy

    if (args.config is None) == (args.server is None):
        raise UsageError("give --config (plan from a fresh listing) or --server (plan in a "
                         "running allset), one of them")
    if args.server is not None:
        server_address(args.server)
    if args.queue is not None and (problem := queue_problem(args.queue)):
        raise UsageError(f"--queue: {problem}")
    try:
        text = read_text(args.request, "request")
    except ConfigError as err:
        raise UsageError(f"--request: {err}") from err
    if args.server is not None:
        return _on_server(args, text)
    config = load_config(args.config)
    try:
        docs = list(yaml.safe_load_all(text))
        refuse_unknown_fields(docs, str(args.request))
        request, templates, objects = split_documents(docs, str(args.request))
        demand, _ = demand_from(request, templates, objects)
        demand = config.guarded(demand, queue=args.queue)
    except yaml.YAMLError as err:
        raise UsageError(f"{args.request}: not valid YAML: {yaml_problem(err)}") from err
    except BadRequest as err:
        lines = "\n".join(f"  {f}: {m}" if f else f"  {m}" for f, m in err.problems)
        where = str(args.request) if err.name == str(args.request) else \
            f"{args.request}: {err.name}"
        raise UsageError(f"{where}:\n{lines}") from err
    clock = SystemClock()
    adapter, config = connect(config, clock)
    try:
        snapshot = adapter.snapshot(config.cluster)
    finally:
        adapter.close()
    ledger = Ledger(config.groups, clock,
                    UnavailableOfferings(clock, config.unavailable_ttl_seconds,
                                         config.not_offered_ttl_seconds))
    ledger.apply(snapshot, clock.now())
    sizes: dict[str, int] = {}
    for inst in snapshot.instances:
        sizes[inst.tags.node_group] = sizes.get(inst.tags.node_group, 0) + 1
    matcher = Matcher(config.groups, config.schema.gpu_label)
    view = ledger.view()
    result = plan(demand, view, matcher, sizes)
    wait = wait_or_buy(demand, view, matcher, sizes, result)
    timing = timing_json(demand, wait)
    if args.output == "json":
        body = plan_json(result)
        if timing is not None:
            body["timing"] = timing
        print(json.dumps(body, indent=2))
    else:
        print(plan_text(demand.name, result))
        if timing is not None:
            print(timing_text(demand, wait))
    return 2 if isinstance(result, Infeasible) and wait is None else 0


def _on_server(args: argparse.Namespace, text: str) -> int:
    import json

    import yaml

    from provider.service.admin import PLAN_METHOD

    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise UsageError(f"{args.request}: not valid YAML: {yaml_problem(err)}") from err
    refuse_unknown_fields(docs, str(args.request))
    body = json.dumps({"documents": docs, "source": str(args.request), "queue": args.queue},
                      default=str)
    found = json.loads(admin_call(args, PLAN_METHOD, body.encode()))
    print(json.dumps(found, indent=2) if args.output == "json" else found["text"])
    feasible = found["plan"]["feasible"] if found["kind"] == "ProvisioningRequest" else \
        any(g["fits"] for g in found["groups"])
    return 0 if feasible else 2
