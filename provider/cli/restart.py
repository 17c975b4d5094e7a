"""`allset restart-on-renewal`: restart Cluster Autoscaler when cert-manager has renewed the
client certificate it presents to allset (provider/controller/restart_on_renewal.py), run
by the CronJob of deploy/kubernetes/base/restart-on-renewal.yaml. One line says what it did
and why; exit 0 whether or not a restart was due, 1 when it could not tell."""

from __future__ import annotations

import argparse

from provider.cli.errors import UsageError


def restart_on_renewal(args: argparse.Namespace) -> int:
    from kubernetes.client.rest import ApiException

    from provider.cli.serve import kube_client
    from provider.controller.kube import Gone
    from provider.controller.restart_on_renewal import RestartOnRenewal

    if args.kubeconfig is not None and not args.kubeconfig.is_file():
        raise UsageError(f"--kubeconfig: {args.kubeconfig} is not a readable file")
    try:
        api = kube_client(args.kubeconfig, connections=2, component="restart-on-renewal")
    except Exception as err:  # the client's ConfigException, or OSError
        raise UsageError(f"the API server's client config could not be loaded: {err}") \
            from err
    job = RestartOnRenewal(api, args.namespace, args.deployment, args.certificate)
    try:
        verdict = job.run(dry_run=args.dry_run)
    except Gone as err:
        raise UsageError(f"{err} does not exist") from err
    except ApiException as err:
        raise UsageError(f"the API server refused: {err.status} {err.reason} "
                         f"({(err.body or '')[:300]})") from err
    target = f"Deployment {args.namespace}/{args.deployment}"
    if not verdict.restart:
        print(f"allset: {target} not restarted: {verdict.why}")
    elif args.dry_run:
        print(f"allset: {target} would be restarted (--dry-run): {verdict.why}")
    else:
        print(f"allset: {target} restarted: {verdict.why}")
    return 0
