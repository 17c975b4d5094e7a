"""The boto3 EC2 clients. Two of them, because retries must differ:

* ``launches`` (RunInstances only) never retries on its own. EC2 answers a stockout with a
  500-class error that botocore would resend; the executor decides what to retry, with the
  same ClientToken, after settling any doubt by listing.
* ``reads`` (describe calls, and the idempotent CreateTags / TerminateInstances) retries
  throttling and server errors in botocore's standard mode, with jittered backoff.

boto3 clients are thread-safe once created; the session that creates them is not, so both are
created up front from one session."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3
from botocore.config import Config

# boto3 ships no type information; the client is dynamic. Everything it returns is turned
# into frozen dataclasses in discovery.py before it leaves the adapter.
Client = Any

_USER_AGENT = "allset"
LAUNCH_CONNECTIONS = 64
READ_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 5},
    connect_timeout=5,
    read_timeout=30,
    user_agent_extra=_USER_AGENT,
)
LAUNCH_CONFIG = Config(
    retries={"mode": "standard", "total_max_attempts": 1},
    connect_timeout=5,
    # A large RunInstances with EFA interfaces can take tens of seconds to answer.
    read_timeout=120,
    user_agent_extra=_USER_AGENT,
    # The executor's part threads, the controller's workers and CA's scale-ups may each be
    # in a launch at once; botocore keeps 10 connections by default and closes the rest
    # after their call, so the eleventh paid a new TLS handshake to EC2 every time.
    max_pool_connections=LAUNCH_CONNECTIONS,
)


@dataclass(frozen=True, slots=True)
class Ec2Clients:
    reads: Client
    launches: Client


def make_clients(
    region: str, endpoint_url: str | None = None, session: boto3.session.Session | None = None
) -> Ec2Clients:
    """Credentials come from the standard chain (environment, IRSA / pod identity, instance
    profile); none are ever read from allset's config."""
    session = session or boto3.session.Session()
    return Ec2Clients(
        reads=session.client("ec2", region_name=region, endpoint_url=endpoint_url,
                             config=READ_CONFIG),
        launches=session.client("ec2", region_name=region, endpoint_url=endpoint_url,
                                config=LAUNCH_CONFIG),
    )
