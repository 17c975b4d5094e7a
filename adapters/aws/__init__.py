"""The AWS adapter: EC2 with boto3. Imported only when ``cloud.provider`` is ``aws``.

Modules: settings (config -> frozen launch settings), client (the two boto3 clients and
their retry policies), discovery (instance types, reservations, instances), launch (one part
as one RunInstances), tags (OwnerTags <-> EC2 tags), errors (EC2 codes -> typed errors),
adapter (the CloudAdapter itself)."""

from __future__ import annotations

import boto3

from adapters.aws.adapter import AwsAdapter
from adapters.aws.client import make_clients
from adapters.aws.settings import settings_from
from provider.base.clock import Clock
from provider.config import ConfigError, LoadedConfig
from provider.domain.cloud import CloudAdapter


def create(
    config: LoadedConfig, clock: Clock, *, session: boto3.session.Session | None = None
) -> CloudAdapter:
    """The adapter for ``config``. ``session`` lets a caller choose credentials or hook the
    clients' events (tests do); by default the standard credential chain is used."""
    settings = settings_from(config)
    session = session or boto3.session.Session()
    # Found now, not at the first call deep in a listing: the chain is lazy for IRSA and
    # pod identity (nothing is fetched here), an instance profile is asked once.
    if session.get_credentials() is None:
        raise ConfigError(config.source, [(
            "cloud.aws", "no AWS credentials found; run with IRSA or EKS pod identity, an "
            "instance profile, or set AWS_PROFILE or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
        )])
    clients = make_clients(settings.region, settings.endpoint_url, session)
    return AwsAdapter(settings, clients, clock)


__all__ = ["AwsAdapter", "create"]
