"""`allset` command line: serve, instances, certs, plan, simulate."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from provider.config import ConfigError, LoadedConfig, load_config

log = logging.getLogger("allset")

DEFAULT_ADDRESS = "127.0.0.1:8086"
DEFAULT_STATE_DIR = Path.home() / ".local" / "state" / "allset"


class UsageError(Exception):
    """Bad command-line input: printed, exit code 1."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    from provider.cli.log_format import configure

    configure(args.log_level, args.log_format)
    if args.log_level != "debug":
        # urllib3 warns about each of its own retries and botocore chats about where it
        # found credentials; our own line says what failed.
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        logging.getLogger("botocore").setLevel(logging.WARNING)
    from provider.cli.errors import cloud_error_line
    from provider.domain.cloud import CloudError

    try:
        code: int = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except BrokenPipeError:
        # The reader went away (`allset instances --output json | head`): not an error to
        # report. Point stdout at /dev/null so the interpreter's last flush stays quiet,
        # and exit as a process killed by SIGPIPE would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    except (ConfigError, UsageError) as err:
        print(f"allset: {err}", file=sys.stderr)
        return 1
    except CloudError as err:
        print(f"allset: {cloud_error_line(err)}", file=sys.stderr)
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="allset",
        description="All-or-nothing, reservation-first Cluster Autoscaler provider for GPU fleets",
    )
    parser.add_argument("--version", action="version", version=f"allset {_version()}")
    parser.add_argument("--log-level", default="info",
                        choices=["debug", "info", "warning", "error"])
    parser.add_argument("--log-format", default="text", choices=["text", "json"],
                        help="json: one object per line, with attempt and request fields")
    sub = parser.add_subparsers(required=True, metavar="command")

    serve = sub.add_parser("serve", help="serve the externalgrpc CloudProvider service")
    serve.add_argument("--config", type=Path,
                       help="config file (default: a built-in demo on the simulated cloud)")
    serve.add_argument("--address", default=DEFAULT_ADDRESS, help="host:port to listen on")
    serve.add_argument("--tls-cert", type=Path, help="server certificate (PEM)")
    serve.add_argument("--tls-key", type=Path, help="server private key (PEM)")
    serve.add_argument("--tls-client-ca", type=Path,
                       help="CA that signs client certificates (mTLS: clients must present one)")
    serve.add_argument("--insecure", action="store_true",
                       help="serve plaintext without TLS, on a loopback address only")
    serve.add_argument("--insecure-bind-any", action="store_true",
                       help="with --insecure, allow a non-loopback --address: anyone who "
                       "can reach it may scale your cloud (not for production)")
    serve.add_argument("--grace", type=float, default=30.0,
                       help="on SIGTERM, seconds scale-ups in flight get to finish (commit "
                       "or roll back) and RPCs in progress to complete; the process exits "
                       "at most 10 s later, whatever still runs (left for recovery at the "
                       "next start) (default: %(default)s)")
    serve.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR,
                       help="local attempt journal (SQLite); safe to lose, the cloud's tags "
                       "are the truth (default: %(default)s)")
    serve.add_argument("--metrics-address", default="",
                       help="host:port to serve Prometheus metrics on (default: off)")
    serve.add_argument("--kubeconfig", type=Path,
                       help="kubeconfig for the ProvisioningRequest controller (in a cluster "
                       "the service account is used)")
    serve.add_argument("--controller", choices=["auto", "on", "off"], default="auto",
                       help="run the ProvisioningRequest controller: auto = when in a cluster "
                       "or given --kubeconfig")
    serve.add_argument("--health-address", default="",
                       help="host:port for a plaintext gRPC health service only, for "
                       "kubelet probes when the main port requires mTLS (default: off)")
    serve.set_defaults(run=_serve)

    instances = sub.add_parser("instances", help="every instance the cloud has for this "
                               "cluster, with its group, attempt and commit state")
    instances.add_argument("--config", type=Path,
                           help="config file (default: the built-in demo)")
    instances.add_argument("--output", choices=["text", "json"], default="text")
    instances.add_argument("--orphans", action="store_true",
                           help="only what reconcile would roll back: instances of attempts "
                           "that never committed (an attempt in flight in a running server "
                           "also shows until it commits)")
    instances.set_defaults(run=_instances)

    stat = sub.add_parser("status", help="what a running allset holds: groups, "
                          "reservations, attempts and their outcomes, bookings")
    stat.add_argument("--server", required=True, metavar="HOST:PORT",
                      help="the allset serve address (CA's port)")
    _client_tls(stat)
    stat.add_argument("--output", choices=["text", "json"], default="text")
    stat.set_defaults(run=_status)

    certs = sub.add_parser("certs", help="write a dev CA, server and client certificates")
    certs.add_argument("--out", type=Path, required=True, help="directory to write PEM files to")
    certs.add_argument("--server-name", action="append", required=True,
                       help="DNS name or IP the server certificate is valid for (repeatable)")
    certs.add_argument("--address", help="address for the printed cloud-config "
                       "(default: first server name, port 8086)")
    certs.add_argument("--days", type=int, default=365,
                       help="validity of every certificate (1 to 36500, default 365)")
    certs.set_defaults(run=_certs)

    plan = sub.add_parser("plan", help="plan a ProvisioningRequest against the cloud now")
    plan.add_argument("--config", type=Path,
                      help="plan from a fresh listing of this config's cloud")
    plan.add_argument("--server", metavar="HOST:PORT", help="plan in a running allset, "
                      "against its live view (claims in flight, recent stockouts)")
    plan.add_argument("--request", type=Path, required=True,
                      help="YAML with the ProvisioningRequest and its PodTemplates; with "
                      "--server also one Pod: a dry run of CA's scale-up for it")
    plan.add_argument("--queue", metavar="NAMESPACE/NAME",
                      help="the Kueue LocalQueue the request comes through (its Workload's "
                      "queueName): its value of waiting under runtimes.queues applies")
    plan.add_argument("--output", choices=["text", "json"], default="text")
    _client_tls(plan)
    plan.set_defaults(run=_plan)

    sim = sub.add_parser("simulate", help="simulate a GPU fleet in virtual time: allset "
                         "against Cluster Autoscaler's per-pod and best-effort-atomic "
                         "scale-up and reserved groups pinned at their reservation's size")
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", type=Path, help="trace file (YAML or JSON)")
    source.add_argument("--generate", type=int, metavar="SEED",
                        help="generate a trace from this seed")
    sim.add_argument("--jobs", type=int, default=2300, help="jobs to generate (default 2300)")
    sim.add_argument("--days", type=float, default=7.0, help="days to generate (default 7)")
    # The names of provider.sim.run.STRATEGIES (imported lazily; a test keeps them equal).
    sim.add_argument("--strategy", choices=["allset", "per-pod", "ca-atomic", "pinned",
                                            "pinned-per-pod", "karpenter", "all"],
                     default="all")
    sim.add_argument("--output", choices=["text", "json"], default="text")
    sim.add_argument("--plot", type=Path, metavar="FILE.png", help="plot the fleet over time")
    sim.add_argument("--seed", type=int, default=0,
                     help="seed of the run's random draws: tie-breaks, boot times, when "
                     "a failure is seen (default 0)")
    sim.add_argument("--runtimes", choices=["declared", "undeclared"],
                     help="whether jobs tell allset their expected runtime and deadline "
                     "(default: the trace's settings.runtimes.declared, true unless set); "
                     "undeclared is allset before time-aware planning")
    sim.set_defaults(run=_simulate)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("allset")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "(not installed)"


def _load(path: Path | None) -> LoadedConfig:
    if path is None:
        from provider.cli.demo import demo_config

        return demo_config()
    return load_config(path)


def _serve(args: argparse.Namespace) -> int:
    import sqlite3

    import grpc
    from prometheus_client import start_http_server

    from adapters.registry import connect
    from provider.app import Provider
    from provider.attempts.journal import SqliteJournal
    from provider.attempts.log import LoggedJournal
    from provider.base.clock import SystemClock
    from provider.cli.shutdown import Shutdown
    from provider.service.address import bind_problem, is_loopback, problem
    from provider.service.server import Server
    from provider.service.tls import check_server_files, server_credentials

    addresses = {"--address": args.address, "--health-address": args.health_address,
                 "--metrics-address": args.metrics_address}
    for flag, address in addresses.items():
        wrong = problem(flag, address) if address else None
        if wrong:
            raise UsageError(wrong)
    tls = (args.tls_cert, args.tls_key, args.tls_client_ca)
    credentials: grpc.ServerCredentials | None
    if args.insecure_bind_any and not args.insecure:
        raise UsageError("--insecure-bind-any only applies with --insecure")
    if args.insecure:
        if any(tls):
            raise UsageError("--insecure cannot be combined with --tls-* flags")
        if not args.insecure_bind_any and not is_loopback(args.address):
            raise UsageError(
                f"--insecure serves plaintext, unauthenticated: --address {args.address} is "
                "not loopback (127.0.0.0/8, ::1, localhost); use mTLS, or add "
                "--insecure-bind-any if you really mean it")
        if args.insecure_bind_any and not is_loopback(args.address):
            log.warning("serving plaintext, unauthenticated gRPC on %s (--insecure-bind-any): "
                        "anyone who can reach it can launch and terminate instances",
                        args.address)
        credentials = None
    elif all(tls):
        for flag, path in zip(("--tls-cert", "--tls-key", "--tls-client-ca"), tls, strict=True):
            if not path.is_file():
                raise UsageError(f"{flag}: {path} is not a readable file")
        wrong = check_server_files(*tls)
        if wrong:
            raise UsageError(wrong)
        credentials = server_credentials(*tls)
    else:
        raise UsageError(
            "serve needs --tls-cert, --tls-key and --tls-client-ca (mTLS), "
            "or --insecure for plaintext (see `allset certs`)"
        )
    # Found before anything starts (a lock, a lease) and before gRPC, which says only
    # "Failed to bind" (and logs a line of its own).
    for flag, address in addresses.items():
        wrong = bind_problem(address) if address else None
        if wrong:
            raise UsageError(f"{flag}: cannot listen on {address}: {wrong}")
    if not 0 <= args.grace <= 3600:
        raise UsageError(f"--grace: {args.grace:g} is not between 0 and 3600 seconds")
    # Before anything is taken (the state lock, the lease, the journal): a SIGTERM from
    # here on is an orderly stop, bounded even while startup still recovers a crash.
    shutdown = Shutdown(args.grace)
    shutdown.install()
    config = _load(args.config)
    clock = SystemClock()
    adapter, config = connect(config, clock)
    # Two processes must not act on one cloud's instances. A simulated cloud held in
    # memory belongs to its own process, so only a shared one (a real cloud, or a
    # simulated one persisted to a file) takes the lock, before anything is written.
    fake = config.schema.cloud.fake
    own_cloud = config.schema.cloud.provider == "fake" and (fake is None or not fake.state_path)
    lock = None if own_cloud else _lock_state(args.state_dir / config.cluster)
    journal_path = args.state_dir / config.cluster / "attempts.db"
    try:
        journal = LoggedJournal(SqliteJournal(
            journal_path, retention_seconds=config.journal_retention_seconds,
            max_finished=config.schema.attempts.journal_max_finished))
    except (OSError, sqlite3.Error) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise UsageError(f"--state-dir: cannot open the journal {journal_path}: {reason}") \
            from err
    election = _election(args, config, clock)
    provider = Provider(config, adapter, clock, journal=journal,
                        leadership=election.elector if election is not None else None)
    if election is not None:
        election.bind(provider)
        election.start()
    try:
        server = Server(provider, args.address, credentials,
                        health_address=args.health_address)
    except (RuntimeError, OSError) as err:  # lost a race for the port since the check
        raise UsageError(f"--address or --health-address: cannot listen: {err}") from err
    if args.metrics_address:
        host, port = args.metrics_address.rsplit(":", 1)
        try:
            start_http_server(int(port), host.strip("[]") or "0.0.0.0",
                              registry=provider.metrics.registry)
        except OSError as err:
            raise UsageError(f"--metrics-address: cannot listen on {args.metrics_address}: "
                             f"{err.strerror}") from err
    controller = _controller(args, provider)
    server.start()
    if controller is not None:
        controller.start()
    mode = "plaintext" if credentials is None else "mTLS"
    print(f"allset: serving {config.source} ({len(config.groups)} node groups, "
          f"cloud {config.schema.cloud.provider}) on {server.address} [{mode}]", flush=True)
    shutdown.wait()
    server.refuse()  # first: no scale-up is taken while the controller drains
    # Its workers run attempts too: drained only if they ended as well.
    quiet = controller.stop(shutdown.remaining()) if controller is not None else True
    drained = server.stop(shutdown.remaining()) and quiet
    if election is not None:
        # After the drain: hand the lease over, the standby takes it now. Not while an
        # attempt may still reach the cloud: then the lease runs out first.
        election.stop(hand_over=drained, timeout=shutdown.margin)
    if not drained:
        # Its threads may still call the cloud: only the process's end stops them (and
        # frees the state lock after them). Their records stay for the next start.
        shutdown.exit_now(f"threads still running after --grace {args.grace:g}s (any "
                          "attempt among them is left for recovery at the next start); "
                          "exiting")
    if lock is not None:
        lock.release()
    return 0


def _lock_state(directory: Path) -> Any:
    """One process per state directory: a second `allset serve` on it is refused."""
    from provider.leadership.statelock import StateDirLock, StateLocked

    lock = StateDirLock(directory)
    try:
        lock.acquire()
    except StateLocked as err:
        raise UsageError(f"--state-dir: {err}") from None
    except OSError as err:
        raise UsageError(f"--state-dir: cannot lock {directory}: {err.strerror}") from err
    return lock


def _election(args: argparse.Namespace, config: LoadedConfig, clock: Any) -> Any:
    """Leader election on a Lease, when replicas may run: in a cluster (mode auto), or
    wherever a kubeconfig is given with mode on. In a cluster the leader also routes the
    allset Service to itself."""
    settings = config.schema.leader_election
    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    if settings.mode == "off" or (settings.mode == "auto" and not in_cluster):
        return None
    if args.kubeconfig is None and not in_cluster:
        raise UsageError("leaderElection.mode on needs --kubeconfig outside a cluster")

    from provider.config.units import duration_seconds
    from provider.leadership.election import Election
    from provider.leadership.endpoint import LeaderEndpoint

    try:
        # The elector, the Lease's watch and the routing writes.
        api = kube_client(args.kubeconfig, connections=4, component="leader-election")
    except Exception as err:  # the client raises its own ConfigException, or OSError
        raise UsageError(f"leader election needs the API server, and its client config "
                         f"could not be loaded: {err}") from err
    endpoint = None
    pod, ip = os.environ.get("POD_NAME"), os.environ.get("POD_IP")
    if in_cluster and pod and ip:
        namespace = settings.namespace or os.environ.get("POD_NAMESPACE") or "kube-system"
        port = int(args.address.rsplit(":", 1)[1])
        endpoint = LeaderEndpoint(api, namespace, settings.service, pod, ip, {"grpc": port},
                                  timeout=duration_seconds(settings.retry_period))
    return Election(config, api, clock, endpoint)


def kube_client(path: Path | None, *, connections: int, component: str) -> Any:
    """An API client from the kubeconfig at ``path`` (in-cluster config without one) that
    keeps up to ``connections`` connections open. urllib3 keeps 10 by default (the client's
    cpu_count * 5 on 2 cores) and closes any beyond that after its call, so with more
    callers at once every call after the tenth paid a new TLS handshake, on allset's side
    and the API server's (a warning main() silences with urllib3's others).

    Its User-Agent names allset, its version, the replica (pod) and the ``component``
    calling, as client-go's name their binary: the API server's audit log and its
    per-client metrics then tell allset's requests apart, and two replicas apart (the
    client's own is the OpenAPI generator's, the same for every Python client)."""
    import socket

    from kubernetes import client
    from kubernetes import config as kubeconfig

    from provider import __version__

    configuration = client.Configuration()
    if path is not None:
        kubeconfig.load_kube_config(config_file=str(path), client_configuration=configuration)
    else:
        kubeconfig.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = max(connections,
                                                configuration.connection_pool_maxsize)
    api = client.ApiClient(configuration)
    replica = os.environ.get("POD_NAME") or socket.gethostname()
    api.user_agent = f"allset/{__version__} ({replica}) {component}"
    return api


def _controller(args: argparse.Namespace, provider: Any) -> Any:
    """The ProvisioningRequest controller, when it should reach a cluster: started in the
    background and retried until the API server answers, so that neither a missing
    kubeconfig nor an API server that is down takes CA's provider down with it."""

    in_cluster = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
    wanted = args.controller == "on" or (
        args.controller == "auto" and (in_cluster or args.kubeconfig is not None))
    if not wanted:
        return None
    if args.kubeconfig is None and not in_cluster:
        raise UsageError("--controller on needs --kubeconfig outside a cluster")

    from provider.config.units import duration_seconds
    from provider.controller.controller import Controller
    from provider.controller.gang_api import GangApi
    from provider.controller.gang_bridge import GangBridge
    from provider.controller.kube import KubeApi
    from provider.controller.requests import Backoff
    from provider.controller.startup import RetryingStart, StartFailed, explain
    from provider.domain.gangs.sources import SOURCES

    def build() -> Controller:
        if args.kubeconfig is not None and not args.kubeconfig.is_file():
            raise StartFailed(f"--kubeconfig {args.kubeconfig}: no such file")
        settings = provider.config.schema.provisioning_requests
        gangs = provider.config.schema.gangs
        # Each worker may be in a call at once, and the three watches (requests, Nodes,
        # pods) hold a connection each for minutes; the labelling, resync and gang threads
        # make calls of their own.
        api = kube_client(args.kubeconfig, connections=settings.workers + 8,
                          component="controller")
        kube = KubeApi(api)
        bridge = GangBridge(GangApi(api), [SOURCES[s] for s in gangs.sources], provider.clock,
                            resync_seconds=duration_seconds(gangs.resync),
                            sweep_seconds=300.0) \
            if gangs.sources else None
        return Controller(
            provider,
            kube,
            workers=settings.workers,
            backoff=Backoff(duration_seconds(settings.initial_backoff),
                            duration_seconds(settings.max_backoff)),
            resync_seconds=duration_seconds(settings.resync),
            gangs=bridge,
        )

    return RetryingStart(build, explain=explain)


def _plan(args: argparse.Namespace) -> int:
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
    from provider.planner.gang import plan
    from provider.planner.matching import Matcher
    from provider.planner.render import plan_json, plan_text, timing_json, timing_text
    from provider.planner.timing import wait_or_buy

    if (args.config is None) == (args.server is None):
        raise UsageError("give --config (plan from a fresh listing) or --server (plan in a "
                         "running allset), one of them")
    if args.queue is not None and (problem := queue_problem(args.queue)):
        raise UsageError(f"--queue: {problem}")
    try:
        text = read_text(args.request, "request")
    except ConfigError as err:
        raise UsageError(f"--request: {err}") from err
    if args.server is not None:
        return _plan_on_server(args, text)
    config = load_config(args.config)
    try:
        docs = list(yaml.safe_load_all(text))
        request, templates, objects = split_documents(docs, str(args.request))
        demand, _ = demand_from(request, templates, objects)
        demand = config.guarded(demand, queue=args.queue)
    except yaml.YAMLError as err:
        raise UsageError(f"{args.request}: not valid YAML: {err}") from err
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
                    UnavailableOfferings(clock, config.unavailable_ttl_seconds))
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


def _plan_on_server(args: argparse.Namespace, text: str) -> int:
    import json

    import yaml

    from provider.service.admin import PLAN_METHOD

    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as err:
        raise UsageError(f"{args.request}: not valid YAML: {err}") from err
    body = json.dumps({"documents": docs, "source": str(args.request), "queue": args.queue},
                      default=str)
    found = json.loads(_admin_call(args, PLAN_METHOD, body.encode()))
    print(json.dumps(found, indent=2) if args.output == "json" else found["text"])
    feasible = found["plan"]["feasible"] if found["kind"] == "ProvisioningRequest" else \
        any(g["fits"] for g in found["groups"])
    return 0 if feasible else 2


def _simulate(args: argparse.Namespace) -> int:
    import json

    from provider.sim.generate import generate
    from provider.sim.report import as_json, text
    from provider.sim.run import STRATEGIES, simulate, with_runtimes
    from provider.sim.trace import load_trace

    if args.trace is not None:
        trace, name = load_trace(args.trace), str(args.trace)
    else:
        if args.jobs < 1 or args.days <= 0:
            raise UsageError("--jobs must be at least 1 and --days positive")
        trace = generate(args.generate, args.jobs, args.days)
        name = f"generated (seed {args.generate}, {args.jobs} jobs, {args.days:g} days)"
    if args.runtimes is not None:
        trace = with_runtimes(trace, args.runtimes == "declared")
    if args.plot is not None:
        _check_plot(args.plot)
    names = list(STRATEGIES) if args.strategy == "all" else [args.strategy]
    results = []
    for i, n in enumerate(names, 1):
        progress = _Progress(f"simulating {n} ({i}/{len(names)})") \
            if sys.stderr.isatty() else None
        results.append(simulate(trace, n, args.seed, progress))
    if args.plot is not None:
        from provider.sim.plot import plot

        plot(results, args.plot, title=name)
    if args.output == "json":
        print(json.dumps(as_json(results, {"source": name, "jobs": len(trace.jobs)}), indent=2))
    else:
        print(text(results, title=f"{name}: {len(trace.jobs)} jobs"))
    return 0


class _Progress:
    """A line on the terminal that says how far a run is, redrawn at most twice a second
    and erased when done (only used when stderr is a terminal)."""

    def __init__(self, what: str) -> None:
        import time

        self._what, self._clock, self._shown = what, time.monotonic, float("-inf")

    def __call__(self, done: float) -> None:
        if done >= 1.0:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
        elif self._clock() - self._shown >= 0.5:
            self._shown = self._clock()
            print(f"\rallset: {self._what}: {done:.0%} of simulated time", end="",
                  file=sys.stderr, flush=True)


def _check_plot(path: Path) -> None:
    """Before a run that may take a while, not after it: can the plot be written there?"""
    try:
        from matplotlib.figure import Figure
    except ModuleNotFoundError as err:
        raise UsageError("--plot needs matplotlib: pip install 'allset[sim]'") from err
    formats = Figure().canvas.get_supported_filetypes()
    if path.suffix.lstrip(".").lower() not in formats:
        raise UsageError(f"--plot: {path}: the name must end in one of "
                         f"{', '.join('.' + f for f in sorted(formats))}")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"--plot: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"--plot: cannot write to {parent}")


def _client_tls(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cacert", type=Path, help="CA that signed the server's "
                        "certificate (with --cert and --key: mTLS, as CA connects)")
    parser.add_argument("--cert", type=Path, help="client certificate")
    parser.add_argument("--key", type=Path, help="client key")
    parser.add_argument("--server-name", help="name to check the server certificate "
                        "against (default: the host of --server)")


def _status(args: argparse.Namespace) -> int:
    import json

    from provider.service.admin import STATUS_METHOD
    from provider.service.status import render

    found = json.loads(_admin_call(args, STATUS_METHOD, b"{}"))
    print(json.dumps(found, indent=2) if args.output == "json" else render(found))
    return 0


def _admin_call(args: argparse.Namespace, method: str, body: bytes) -> bytes:
    """One call to a running server's admin service, over mTLS when given certificates."""
    import grpc

    files = [args.cacert, args.cert, args.key]
    if any(files) and not all(files):
        raise UsageError("--cacert, --cert and --key go together (mTLS), or none of them")
    if all(files):
        try:
            creds = grpc.ssl_channel_credentials(args.cacert.read_bytes(), args.key.read_bytes(),
                                                 args.cert.read_bytes())
        except OSError as err:
            raise UsageError(f"cannot read {err.filename}: {err.strerror}") from err
        options = [("grpc.ssl_target_name_override", args.server_name)] \
            if args.server_name else []
        channel = grpc.secure_channel(args.server, creds, options=options)
    else:
        channel = grpc.insecure_channel(args.server)
    try:
        answer: bytes = channel.unary_unary(method)(body, timeout=30)
    except grpc.RpcError as err:
        code = err.code().name if isinstance(err, grpc.Call) else "error"
        detail = err.details() if isinstance(err, grpc.Call) else str(err)
        raise UsageError(f"--server {args.server}: {code}: {detail}") from None
    finally:
        channel.close()
    return answer


def _instances(args: argparse.Namespace) -> int:
    import json

    from adapters.registry import connect
    from provider.attempts.reconcile import classify
    from provider.base.clock import SystemClock

    config = _load(args.config)
    adapter, config = connect(config, SystemClock())
    try:
        snapshot = adapter.snapshot(config.cluster)
    finally:
        adapter.close()
    found = classify(snapshot, in_flight=(), groups={g.id for g in config.groups})
    # Orphans: uncommitted attempts (rolled back after the grace period) and committed
    # instances of groups no longer configured (reported; see reconcile.unknownGroups).
    why = {i.id: "uncommitted" for i in found.orphans}
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
    } for i in sorted(rows, key=lambda i: (i.tags.node_group, i.tags.attempt, i.id))]
    if args.output == "json":
        print(json.dumps(records, indent=2))
        return 0
    header = ("INSTANCE", "GROUP", "ATTEMPT", "PART", "SOURCE", "RESERVATION", "STATE",
              "COMMITTED", "ORPHAN")
    table = [header] + [(r["id"], r["nodeGroup"], r["attempt"], r["part"], r["source"],
                         r["reservation"] or "-", r["state"], "yes" if r["committed"] else "no",
                         r["orphan"] or "-")
                        for r in records]
    widths = [max(len(str(row[c])) for row in table) for c in range(len(header))]
    for row in table:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
    if not records:
        print("(no orphans)" if args.orphans else "(no instances)")
    return 0


def _certs(args: argparse.Namespace) -> int:
    from provider.service.tls import write_dev_pki

    if not 1 <= args.days <= 36500:
        raise UsageError(f"--days: {args.days} is not between 1 and 36500")
    try:
        issued = write_dev_pki(args.out, args.server_name, days=args.days)
    except FileExistsError as err:
        raise UsageError(f"--out: {err.filename} already exists; remove it or choose "
                         "another directory (certs never overwrites a key)") from err
    except OSError as err:
        raise UsageError(f"--out: cannot write {err.filename or args.out}: "
                         f"{err.strerror}") from err
    address = args.address or f"{args.server_name[0]}:8086"
    print(f"# Wrote {args.out}/ca.crt, server.crt/.key and client.crt/.key")
    print("# Serve with:")
    print(f"#   allset serve --tls-cert {issued['server'].cert} --tls-key {issued['server'].key} "
          f"--tls-client-ca {issued['ca'].cert}")
    print("# Cluster Autoscaler cloud-config (--cloud-config) for --cloud-provider=externalgrpc:")
    print(f"address: {address}")
    print(f"cert: {issued['client'].cert}")
    print(f"key: {issued['client'].key}")
    print(f"cacert: {issued['ca'].cert}")
    print("grpc_timeout: 10s")
    return 0

