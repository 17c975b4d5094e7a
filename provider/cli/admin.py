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


def server_address(server: str) -> tuple[str, int] | None:
    """(host, port) of --server, None for a Unix socket; a UsageError for anything else.
    Also the first thing a client command does: from here on gRPC's core stays quiet,
    since this command's one line explains a failed call (gRPC would log its handshake
    errors too, and reads the setting once, when it is first imported)."""
    import os

    from provider.service.address import split

    os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    if server.startswith("unix:"):
        return None
    where = split(server)
    if where is None or not where[0]:
        # gRPC would dial a bare name on port 443, and say only that it failed.
        example = f"{server}:8086" if ":" not in server else "127.0.0.1:8086"
        raise UsageError(f"--server: {server!r} is not host:port; give the port allset "
                         f"serves on (8086 unless its --address says otherwise), e.g. {example}")
    return where


def status(args: argparse.Namespace) -> int:
    import json

    server_address(args.server)  # before gRPC is imported
    from provider.service.admin import STATUS_METHOD
    from provider.service.status import render

    found = json.loads(admin_call(args, STATUS_METHOD, b"{}"))
    print(json.dumps(found, indent=2) if args.output == "json" else render(found))
    return 0


def admin_call(args: argparse.Namespace, method: str, body: bytes) -> bytes:
    """One call to a running server's admin service, over mTLS when given certificates."""
    where = server_address(args.server)
    import grpc

    from provider.cli.dial import ClientTls, explain, file_problem

    files = [args.cacert, args.cert, args.key]
    if any(files) and not all(files):
        raise UsageError("--cacert, --cert and --key go together (mTLS), or none of them")
    tls = ClientTls(args.cacert, args.cert, args.key, args.server_name) if all(files) else None
    if tls is not None:
        try:
            creds = grpc.ssl_channel_credentials(tls.cacert.read_bytes(), tls.key.read_bytes(),
                                                 tls.cert.read_bytes())
        except OSError as err:
            raise UsageError(f"cannot read {err.filename}: {err.strerror}") from err
        wrong = file_problem(tls)
        if wrong:
            raise UsageError(wrong)
        options = [("grpc.ssl_target_name_override", args.server_name)] \
            if args.server_name else []
        channel = grpc.secure_channel(args.server, creds, options=options)
    else:
        channel = grpc.insecure_channel(args.server)
    try:
        answer: bytes = channel.unary_unary(method)(body, timeout=30)
    except grpc.RpcError as err:
        code = err.code() if isinstance(err, grpc.Call) else None
        why = explain(args.server, where[0], where[1], tls) \
            if code is grpc.StatusCode.UNAVAILABLE and where is not None else None
        if why is not None:
            raise UsageError(why) from None
        detail = err.details() if isinstance(err, grpc.Call) else str(err)
        raise UsageError(f"--server {args.server}: {code.name if code else 'error'}: "
                         f"{detail}") from None
    finally:
        channel.close()
    return answer
