"""`allset` command line: serve, instances, certs, plan, simulate, status, validate,
restart-on-renewal. Each command's
work is in a module of its own beside this one, and imports what it needs when it runs, so
`allset --help` starts fast."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from provider.cli.admin import client_tls
from provider.cli.admin import status as run_status
from provider.cli.certs import certs as run_certs
from provider.cli.errors import UsageError
from provider.cli.instances import instances as run_instances
from provider.cli.plan import plan as run_plan
from provider.cli.restart import restart_on_renewal as run_restart_on_renewal
from provider.cli.serve import DEFAULT_ADDRESS, DEFAULT_STATE_DIR
from provider.cli.serve import serve as run_serve
from provider.cli.simulate import simulate as run_simulate
from provider.cli.validate import validate as run_validate
from provider.config import ConfigError
from provider.service.identities import AUTOSCALER_CN, OPERATOR_CN

INTERRUPTED = 128 + signal.SIGINT  # 130, as a shell reports a command Ctrl-C ended


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:
        # Ctrl-C, in any command but serve (which drains: cli/shutdown.py): one line.
        _complain("interrupted")
        return INTERRUPTED


def _complain(line: str) -> None:
    """What went wrong, on stderr: `allset: <line>`, or a JSON record with --log-format
    json."""
    from provider.cli.log_format import is_json

    if is_json():
        logging.getLogger("allset").error(line)
    else:
        print(f"allset: {line}", file=sys.stderr)


def _main(argv: Sequence[str] | None) -> int:
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
        _complain(str(err))
        return 1
    except CloudError as err:
        _complain(cloud_error_line(err))
        return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="allset",
        description="All-or-nothing, reservation-first Cluster Autoscaler provider for GPU fleets",
    )
    parser.add_argument("--version", action=_Version, help="print the version and the commit "
                        "allset was built from, and exit")
    _log_flags(parser, default=True)
    # The same flags after the command (`allset serve --log-format json`): given there they
    # win; left out they leave the top level's value alone (SUPPRESS sets nothing).
    common = argparse.ArgumentParser(add_help=False)
    _log_flags(common, default=False)
    sub = parser.add_subparsers(required=True, metavar="command")

    serve = sub.add_parser("serve", parents=[common],
                           help="serve the externalgrpc CloudProvider service")
    serve.add_argument("--config", type=Path,
                       help="config file (default: a built-in demo on the simulated cloud)")
    serve.add_argument("--address", default=DEFAULT_ADDRESS, help="host:port to listen on")
    serve.add_argument("--tls-cert", type=Path, help="server certificate (PEM)")
    serve.add_argument("--tls-key", type=Path, help="server private key (PEM)")
    serve.add_argument("--tls-client-ca", type=Path,
                       help="CA that signs client certificates (mTLS: clients must present one)")
    serve.add_argument("--autoscaler-cn", action="append", metavar="NAME",
                       help="Common Name of Cluster Autoscaler's client certificate: it may "
                       "call the CloudProvider service, nothing else (repeatable; default "
                       f"{AUTOSCALER_CN})")
    serve.add_argument("--operator-cn", action="append", metavar="NAME",
                       help="Common Name of an operator's client certificate: it may call "
                       "the admin service (status, plan --server) and CloudProvider's "
                       f"read-only methods (repeatable; default {OPERATOR_CN})")
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
    serve.add_argument("--admin-socket", type=Path, metavar="PATH",
                       help="also serve the admin service (status, plan --server) on this "
                       "Unix socket, plaintext, mode 0600: for `kubectl exec <pod> -- allset "
                       "status --server unix:PATH` (default: off)")
    serve.add_argument("--webhook-address", default="", metavar="HOST:PORT",
                       help="serve the admission webhook that marks a gang's pods for allset "
                       "when they are created (HTTPS; needs --webhook-cert, --webhook-key "
                       "and the API server) (default: off)")
    serve.add_argument("--webhook-cert", type=Path, help="the webhook's certificate (PEM)")
    serve.add_argument("--webhook-key", type=Path, help="the webhook's private key (PEM)")
    serve.set_defaults(run=run_serve)

    instances = sub.add_parser("instances", parents=[common],
                               help="every instance the cloud has for this cluster, with "
                               "its group, attempt and commit state")
    instances.add_argument("--config", type=Path,
                           help="config file (default: the built-in demo)")
    instances.add_argument("--server", metavar="HOST:PORT",
                           help="ask a running allset for its cloud's instances (as status "
                           "does), or unix:PATH for its --admin-socket")
    client_tls(instances)
    instances.add_argument("--output", choices=["text", "json"], default="text")
    instances.add_argument("--orphans", action="store_true",
                           help="only what reconcile would roll back: instances of attempts "
                           "that never committed (without --server, an attempt in flight "
                           "in a running server also shows until it commits)")
    instances.set_defaults(run=run_instances)

    stat = sub.add_parser("status", parents=[common],
                          help="what a running allset holds: groups, reservations, "
                          "attempts and their outcomes, bookings")
    stat.add_argument("--server", required=True, metavar="HOST:PORT",
                      help="the allset serve address (CA's port), or unix:PATH for its "
                      "--admin-socket (inside its pod, no certificates)")
    client_tls(stat)
    stat.add_argument("--output", choices=["text", "json"], default="text")
    stat.set_defaults(run=run_status)

    certs = sub.add_parser("certs", parents=[common],
                           help="write a dev CA, server, CA's client and operator certificates")
    certs.add_argument("--out", type=Path, required=True, help="directory to write PEM files to")
    certs.add_argument("--server-name", action="append", required=True,
                       help="DNS name or IP the server certificate is valid for (repeatable)")
    certs.add_argument("--address", help="address for the printed cloud-config "
                       "(default: first server name, port 8086)")
    certs.add_argument("--days", type=int, default=365,
                       help="validity of every certificate (1 to 36500, default 365)")
    certs.set_defaults(run=run_certs)

    check = sub.add_parser("validate", parents=[common],
                           help="check a config offline (schema, rules across fields, groups' "
                           "shapes): no cloud credentials, no network, nothing written")
    check.add_argument("--config", type=Path, required=True, help="config file")
    check.set_defaults(run=run_validate)

    plan = sub.add_parser("plan", parents=[common],
                          help="plan a ProvisioningRequest against the cloud now")
    plan.add_argument("--config", type=Path,
                      help="plan from a fresh listing of this config's cloud")
    plan.add_argument("--server", metavar="HOST:PORT", help="plan in a running allset, "
                      "against its live view (claims in flight, recent stockouts); "
                      "unix:PATH for its --admin-socket")
    plan.add_argument("--request", type=Path, required=True,
                      help="YAML with the ProvisioningRequest and its PodTemplates; with "
                      "--server also one Pod: a dry run of CA's scale-up for it")
    plan.add_argument("--queue", metavar="NAMESPACE/NAME",
                      help="the Kueue LocalQueue the request comes through (its Workload's "
                      "queueName): its value of waiting under runtimes.queues and its cost "
                      "of running away from the data under locality.queues apply")
    plan.add_argument("--output", choices=["text", "json"], default="text")
    client_tls(plan)
    plan.set_defaults(run=run_plan)

    restart = sub.add_parser(
        "restart-on-renewal", parents=[common],
        help="restart Cluster Autoscaler's Deployment if a pod of it started before its "
        "client certificate was last renewed (CA reads it only at start); for a CronJob")
    restart.add_argument("--namespace", default="allset",
                         help="where CA, its Certificate and its Deployment are "
                         "(default: %(default)s)")
    restart.add_argument("--deployment", default="cluster-autoscaler",
                         help="CA's Deployment (default: %(default)s)")
    restart.add_argument("--certificate", default="allset-client",
                         help="the cert-manager Certificate of CA's client certificate "
                         "(default: %(default)s)")
    restart.add_argument("--kubeconfig", type=Path,
                         help="kubeconfig (in a cluster the service account is used)")
    restart.add_argument("--dry-run", action="store_true",
                         help="say whether a restart is due, and restart nothing")
    restart.set_defaults(run=run_restart_on_renewal)

    sim = sub.add_parser("simulate", parents=[common],
                         help="simulate a GPU fleet in virtual time: allset against "
                         "Cluster Autoscaler's per-pod and best-effort-atomic scale-up and "
                         "reserved groups pinned at their reservation's size")
    source = sim.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", type=Path, help="trace file (YAML or JSON)")
    source.add_argument("--generate", type=int, metavar="SEED",
                        help="generate a trace from this seed")
    sim.add_argument("--jobs", type=int, default=2300, help="jobs to generate (default 2300)")
    sim.add_argument("--days", type=float, default=7.0, help="days to generate (default 7)")
    # The names of provider.sim.run.STRATEGIES (imported lazily; a test keeps them equal).
    sim.add_argument("--strategy", choices=["allset", "per-pod", "ca-atomic",
                                            "careful-ca-atomic", "pinned",
                                            "pinned-per-pod", "karpenter", "all"],
                     default="all")
    sim.add_argument("--output", choices=["text", "json"], default="text")
    sim.add_argument("--plot", type=Path, metavar="FILE.png",
                     help="plot the claim: each strategy's on-demand spend against its wait "
                     "p95, its stranded GPU-hours and interrupted jobs (with --seeds, their "
                     "range), and spend over time")
    sim.add_argument("--seeds", type=int, default=1, metavar="N",
                     help="run N seeds from --seed and report each figure's median and range "
                     "(default 1)")
    sim.add_argument("--tune", action="store_true",
                     help="run every scale-down tuning of the fair comparison (CA's defaults, "
                     "1 min, 10 s) and keep each strategy's best: the least median on-demand "
                     "spend at a wait p95 of at most 10 min")
    sim.add_argument("--seed", type=int, default=0,
                     help="seed of the run's random draws: tie-breaks, boot times, when "
                     "a failure is seen (default 0)")
    sim.add_argument("--runtimes", choices=["declared", "undeclared"],
                     help="whether jobs tell allset their expected runtime and deadline "
                     "(default: the trace's settings.runtimes.declared, true unless set); "
                     "undeclared is allset before time-aware planning")
    sim.set_defaults(run=run_simulate)
    return parser


def _log_flags(parser: argparse.ArgumentParser, *, default: bool) -> None:
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"],
                        default="info" if default else argparse.SUPPRESS)
    parser.add_argument("--log-format", choices=["text", "json"],
                        default="text" if default else argparse.SUPPRESS,
                        help="json: one object per line, with attempt and request fields")


class _Version(argparse.Action):
    """--version, worked out only when asked (a checkout asks git for its commit)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help=str(kwargs.get("help") or ""))

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        from provider.base.build import describe

        print(describe())
        parser.exit()
