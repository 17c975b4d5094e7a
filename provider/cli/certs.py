"""`allset certs`: a development CA with server and client certificates (CA's, and an
operator's for `allset status`), and the cloud-config CA reads them from."""

from __future__ import annotations

import argparse

from provider.cli.errors import UsageError


def certs(args: argparse.Namespace) -> int:
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
    print(f"# Wrote {args.out}/ca.crt, server.crt/.key, client.crt/.key (Cluster Autoscaler's) "
          "and operator.crt/.key (for allset status and plan --server)")
    print("# Serve with:")
    print(f"#   allset serve --tls-cert {issued['server'].cert} --tls-key {issued['server'].key} "
          f"--tls-client-ca {issued['ca'].cert}")
    print("# Inspect with (only the operator certificate may call the admin service):")
    print(f"#   allset status --server {address} --cacert {issued['ca'].cert} "
          f"--cert {issued['operator'].cert} --key {issued['operator'].key}")
    print("# Cluster Autoscaler cloud-config (--cloud-config) for --cloud-provider=externalgrpc:")
    print(f"address: {address}")
    print(f"cert: {issued['client'].cert}")
    print(f"key: {issued['client'].key}")
    print(f"cacert: {issued['ca'].cert}")
    print("grpc_timeout: 10s")
    return 0
