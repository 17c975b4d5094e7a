"""A ProvisioningRequest's UID travels with its instances through every adapter's tags, so
a request is matched to its instances by UID, never by its name (issue 12, finding 9)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from adapters.aws import tags as aws
from adapters.fake.store import FakeStore
from adapters.gcp import labels as gcp
from provider.domain.cloud import CapacityType, CloudInstance, InstanceState, OwnerTags

UID = "6f1c2a9e-3b4d-4e5f-8a7b-0c1d2e3f4a5b"
TAGS = OwnerTags("prod", "h100-a", "r-0123456789abcdef", "0.1", CapacityType.ON_DEMAND,
                 request="team-a/train", request_uid=UID)


def test_aws_tags_carry_the_request_uid() -> None:
    written = aws.owner_tags(TAGS)
    assert written[aws.REQUEST_UID] == UID
    assert aws.parse_owner(written) == TAGS
    # Instances launched before the UID tag existed read as having none.
    older = {k: v for k, v in written.items() if k != aws.REQUEST_UID}
    assert aws.parse_owner(older) == dataclasses.replace(TAGS, request_uid=None)


def test_gcp_labels_carry_the_request_uid() -> None:
    written = gcp.to_labels(TAGS)
    assert written[gcp.REQUEST_UID] == UID  # a UID is already a valid label value
    assert gcp.from_labels(written) == TAGS


def test_the_simulated_clouds_store_keeps_the_request_uid(tmp_path: Path) -> None:
    store = FakeStore(tmp_path / "cloud.db")
    inst = CloudInstance("i-1", "fake://us-east-1a/i-1", "i-1", "us-east-1a", "p5.48xlarge",
                         InstanceState.RUNNING, TAGS)
    store.save([inst])
    store.close()
    store = FakeStore(tmp_path / "cloud.db")
    (loaded,), _ = store.load()
    store.close()
    assert loaded.tags.request_uid == UID


def test_every_adapter_carries_the_plans_node_count() -> None:
    """The gang's size travels on its instances (adversary seed 504); a damaged value
    reads as absent, never as a guess."""
    tags = dataclasses.replace(TAGS, plan_nodes=16)
    written = aws.owner_tags(tags)
    assert written[aws.PLAN_NODES] == "16" and aws.parse_owner(written) == tags
    assert aws.parse_owner({**written, aws.PLAN_NODES: "x"}) == TAGS
    labels = gcp.to_labels(tags)
    assert labels[gcp.PLAN_NODES] == "16" and gcp.from_labels(labels) == tags
    assert gcp.from_labels({**labels, gcp.PLAN_NODES: "0"}) == TAGS
