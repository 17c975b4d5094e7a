"""`allset serve`: the edges wired around one Provider (the gRPC server, the metrics
endpoint, the ProvisioningRequest controller, leader election or the state-directory lock),
started in order and stopped in order on SIGTERM."""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from provider.cli.demo import config_or_demo
from provider.cli.errors import UsageError
from provider.cli.log_format import is_json
from provider.config import LoadedConfig
from provider.service.identities import AUTOSCALER_CN, OPERATOR_CN, Identities

log = logging.getLogger("allset")

DEFAULT_ADDRESS = "127.0.0.1:8086"
DEFAULT_STATE_DIR = Path.home() / ".local" / "state" / "allset"
# CA's calls share the process, and its GIL, with the requests' planning: each hop of a
# call waits for the GIL up to the switch interval (5 ms by default) while a plan computes.
SWITCH_SECONDS = 0.001


def favour_ca_latency() -> None:
    """Once started: a shorter GIL switch interval, and what start-up built (config,
    matcher, the first listing: long-lived) left out of the cyclic collector's full
    passes, which stop every thread for as long as they walk the heap (a plan's garbage
    sets them off). Issue 32, bench/plan_limits.py."""
    sys.setswitchinterval(SWITCH_SECONDS)
    gc.freeze()


def serve(args: argparse.Namespace) -> int:
    import sqlite3

    import grpc
    from prometheus_client import start_http_server

    from adapters.registry import connect
    from provider.app import Provider
    from provider.attempts.journal import SqliteJournal
    from provider.attempts.log import LoggedJournal
    from provider.attempts.planning import PlanProcess
    from provider.base.clock import SystemClock
    from provider.cli.shutdown import Shutdown
    from provider.service.address import bind_problem, is_loopback, problem
    from provider.service.server import Server
    from provider.service.tls import check_server_files, server_credentials

    addresses = {"--address": args.address, "--health-address": args.health_address,
                 "--metrics-address": args.metrics_address,
                 "--webhook-address": args.webhook_address}
    for flag, address in addresses.items():
        wrong = problem(flag, address) if address else None
        if wrong:
            raise UsageError(wrong)
    tls = (args.tls_cert, args.tls_key, args.tls_client_ca)
    credentials: grpc.ServerCredentials | None
    if args.insecure_bind_any and not args.insecure:
        raise UsageError("--insecure-bind-any only applies with --insecure")
    identities = _identities(args)
    if args.insecure:
        if any(tls):
            raise UsageError("--insecure cannot be combined with --tls-* flags")
        if args.autoscaler_cn or args.operator_cn:
            raise UsageError("--autoscaler-cn and --operator-cn name client certificates: "
                             "they apply with mTLS, not --insecure (plaintext has no identity)")
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
    if args.kubeconfig is not None:
        # A file named on the command line that is not there is a typo, not an API server
        # that is down: the controller's start would retry it forever.
        try:
            text = args.kubeconfig.read_bytes()
        except OSError as err:
            raise UsageError(f"--kubeconfig: cannot read {args.kubeconfig}: "
                             f"{err.strerror or err}") from err
        unusable = kubeconfig_problem(text)
        if unusable is not None:
            raise UsageError(f"--kubeconfig: {args.kubeconfig} is not a usable kubeconfig: "
                             f"{unusable}")
    wrong = webhook_problem(args)
    if wrong:
        raise UsageError(wrong)
    if not 0 <= args.grace <= 3600:
        raise UsageError(f"--grace: {args.grace:g} is not between 0 and 3600 seconds")
    # The config's mistakes before the machine's: a wrong file is reported first, whatever
    # holds the ports (loading reads the file and takes nothing).
    config = config_or_demo(args.config)
    # Found before anything starts (a lock, a lease) and before gRPC, which says only
    # "Failed to bind" (and logs a line of its own).
    for flag, address in addresses.items():
        wrong = bind_problem(address) if address else None
        if wrong:
            raise UsageError(f"{flag}: cannot listen on {address}: {wrong}")
    if args.admin_socket is not None:
        wrong = _socket_problem(args.admin_socket)
        if wrong:
            raise UsageError(f"--admin-socket: {wrong}")
    # Before anything is taken (the state lock, the lease, the journal): a SIGTERM from
    # here on is an orderly stop, bounded even while startup still recovers a crash.
    shutdown = Shutdown(args.grace)
    shutdown.install()
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
    # Requests' plans are built in a process of their own: CA's RPC threads never wait
    # for the interpreter's lock while a large request is planned (attempts/planning.py).
    planner = PlanProcess(config.groups, config.schema.gpu_label)
    provider = Provider(config, adapter, clock, journal=journal,
                        leadership=election.elector if election is not None else None,
                        planner=planner)
    if election is not None:
        election.bind(provider)
        election.start()
    try:
        server = Server(provider, args.address, credentials,
                        health_address=args.health_address, identities=identities,
                        admin_socket=str(args.admin_socket or ""))
    except (RuntimeError, OSError) as err:  # lost a race for the port since the check
        raise UsageError(f"--address, --health-address or --admin-socket: cannot listen: "
                         f"{err}") from err
    if args.metrics_address:
        host, port = args.metrics_address.rsplit(":", 1)
        try:
            start_http_server(int(port), host.strip("[]") or "0.0.0.0",
                              registry=provider.metrics.registry)
        except OSError as err:
            raise UsageError(f"--metrics-address: cannot listen on {args.metrics_address}: "
                             f"{err.strerror}") from err
    controller = _controller(args, provider)
    webhook = start_webhook(args, provider)
    server.start()
    favour_ca_latency()
    if controller is not None:
        controller.start()
    mode = "plaintext" if credentials is None else "mTLS"
    banner = (f"allset: serving {config.source} ({len(config.groups)} node groups, "
              f"cloud {config.schema.cloud.provider}) on {server.address} [{mode}]")
    if is_json():
        log.info(banner)  # every line JSON (log_format.py)
    else:
        print(banner, flush=True)
    shutdown.wait()
    server.refuse()  # first: no scale-up is taken while the controller drains
    # Its workers run attempts too: drained only if they ended as well.
    quiet = controller.stop(shutdown.remaining()) if controller is not None else True
    drained = server.stop(shutdown.remaining()) and quiet
    if webhook is not None:
        webhook.stop()  # after the drain: pods made meanwhile are still marked
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
    planner.close()
    if lock is not None:
        lock.release()
    # Ctrl-C ends allset as it ends any command (130); SIGTERM, the orderly stop Kubernetes
    # asks for, is a success.
    return 128 + signal.SIGINT if shutdown.signal_name == "SIGINT" else 0


def _identities(args: argparse.Namespace) -> Identities:
    """Who is the autoscaler and who an operator, by certificate Common Name."""
    identities = Identities(
        autoscaler=frozenset(args.autoscaler_cn or [AUTOSCALER_CN]),
        operators=frozenset(args.operator_cn or [OPERATOR_CN]))
    both = identities.overlap()
    if both:
        raise UsageError(f"--autoscaler-cn and --operator-cn both name {', '.join(sorted(both))}: "
                         "an operator's certificate must not be able to change the cloud")
    return identities


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
    from provider.leadership.election import Election, namespace_of
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
        namespace = namespace_of(settings.namespace)
        port = int(args.address.rsplit(":", 1)[1])
        endpoint = LeaderEndpoint(api, namespace, settings.service, pod, ip, {"grpc": port},
                                  timeout=duration_seconds(settings.retry_period))
    return Election(config, api, clock, endpoint)


def kubeconfig_problem(text: bytes) -> str | None:
    """Why a kubeconfig cannot be used as it is (None: it can), read as the client reads
    it: YAML, then its current context, that context's cluster and user, the cluster's
    server. Credentials are not loaded here (an exec plugin may call out); a broken file is
    a mistake to report once, not an API server to retry forever."""
    import yaml
    from kubernetes.config import kube_config

    from provider.base.yaml_errors import yaml_problem

    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as err:
        return f"not YAML: {yaml_problem(err)}"
    if not isinstance(loaded, dict):
        return "not a mapping of clusters, contexts and users"
    try:
        loader = kube_config.KubeConfigLoader(config_dict=loaded)
        loader._load_cluster_info()  # the server and TLS settings, no credentials
    except kube_config.ConfigException as err:
        return str(err).removeprefix("Invalid kube-config file. ").rstrip(".")
    except (KeyError, TypeError, ValueError) as err:
        return f"malformed ({err})"
    return None


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

    from provider.base.build import version
    from provider.controller.kube import unsent_only

    configuration = client.Configuration()
    if path is not None:
        kubeconfig.load_kube_config(config_file=str(path), client_configuration=configuration)
    else:
        kubeconfig.load_incluster_config(client_configuration=configuration)
    configuration.connection_pool_maxsize = max(connections,
                                                configuration.connection_pool_maxsize)
    configuration.retries = unsent_only()
    api = client.ApiClient(configuration)
    replica = os.environ.get("POD_NAME") or socket.gethostname()
    api.user_agent = f"allset/{version()} ({replica}) {component}"
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
    from provider.controller.gang_queues import QueueReader
    from provider.controller.kube import READ_TIMEOUT, KubeApi, write_timeout_for
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
        election = provider.config.schema.leader_election
        writes = write_timeout_for(duration_seconds(election.lease_duration),
                                   duration_seconds(election.renew_deadline),
                                   duration_seconds(election.retry_period))
        kube = KubeApi(api, write_timeout=writes, read_timeout=READ_TIMEOUT)
        gang_api = GangApi(api, write_timeout=writes)
        bridge = GangBridge(gang_api,
                            [SOURCES[s] for s in gangs.sources], provider.clock,
                            resync_seconds=duration_seconds(gangs.resync),
                            sweep_seconds=300.0, served=provider.gang_api_served,
                            queues=QueueReader(gang_api, gangs.yunikorn_namespace),
                            held=provider.gang_held) \
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


# sun_path holds 108 bytes on Linux, the terminating NUL included.
_SOCKET_PATH_MAX = 107


def _socket_problem(path: Path) -> str | None:
    """Why a Unix socket cannot be made at ``path``, or None (gRPC would say only that it
    failed to bind)."""
    if len(os.fsencode(path)) > _SOCKET_PATH_MAX:
        return f"{path} is longer than the {_SOCKET_PATH_MAX} bytes a Unix socket path may be"
    parent = path.parent
    if not parent.is_dir():
        return f"{parent} is not a directory (create it, or mount one: an emptyDir in a pod)"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{parent} is not writable by this user (uid {os.getuid()})"
    if path.exists() and not path.is_socket():
        return f"{path} exists and is not a socket"
    return None


WEBHOOK_READ_TIMEOUT = 2.0  # seconds; the webhook configuration allows the API server 5


def webhook_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the webhook's flags (None: nothing, or no webhook asked for)."""
    if not args.webhook_address:
        if args.webhook_cert or args.webhook_key:
            return "--webhook-cert and --webhook-key apply with --webhook-address"
        return None
    for flag, path in (("--webhook-cert", args.webhook_cert),
                       ("--webhook-key", args.webhook_key)):
        if path is None:
            return f"--webhook-address serves HTTPS: {flag} is needed"
        if not path.is_file():
            return f"{flag}: {path} is not a readable file"
    if args.kubeconfig is None and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "--webhook-address reads gangs from the API server: give --kubeconfig " \
            "outside a cluster"
    return None


def start_webhook(args: argparse.Namespace, provider: Any) -> Any:
    """The webhook server, listening (None without --webhook-address)."""
    if not args.webhook_address:
        return None
    import ssl

    from provider.controller.gang_api import GangApi
    from provider.controller.gang_marks import GangMarker
    from provider.controller.webhook import WebhookMetrics, WebhookServer
    from provider.domain.gangs.sources import SOURCES

    api = kube_client(args.kubeconfig, connections=8, component="webhook")
    sources = [SOURCES[s] for s in provider.config.schema.gangs.sources]
    # Reads bounded well inside the API server's timeoutSeconds (5 s): a slow read marks
    # the pod all the same.
    marker = GangMarker(GangApi(api, read_timeout=WEBHOOK_READ_TIMEOUT), sources)
    try:
        server = WebhookServer(args.webhook_address, args.webhook_cert, args.webhook_key,
                               marker, WebhookMetrics(provider.metrics.registry))
    except (OSError, ssl.SSLError) as err:
        raise UsageError(f"--webhook-address {args.webhook_address}, --webhook-cert, "
                         f"--webhook-key: {err}") from err
    server.start()
    return server
