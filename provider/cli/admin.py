"""The client side of a running allset's admin service: `allset status`, and the call
`allset plan --server` makes."""

from __future__ import annotations

import argparse
from pathlib import Path

from provider.cli.errors import UsageError


def client_tls(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cacert", type=Path, help="CA that signed the server's "
                        "certificate (with --cert and --key: mTLS)")
    parser.add_argument("--cert", type=Path, help="client certificate: an operator's "
                        "(operator.crt from `allset certs`, secret allset-operator-tls); "
                        "CA's may not call the admin service")
    parser.add_argument("--key", type=Path, help="its key")
    parser.add_argument("--server-name", help="name to check the server certificate "
                        "against (default: the host of --server)")


def status(args: argparse.Namespace) -> int:
    import json

    from provider.service.admin import STATUS_METHOD
    from provider.service.status import render

    found = json.loads(admin_call(args, STATUS_METHOD, b"{}"))
    print(json.dumps(found, indent=2) if args.output == "json" else render(found))
    return 0


def admin_call(args: argparse.Namespace, method: str, body: bytes) -> bytes:
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
