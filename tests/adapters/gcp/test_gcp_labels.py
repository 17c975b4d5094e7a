"""OwnerTags survive the trip through GCE labels, whatever their values."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from adapters.gcp import labels
from provider.domain.cloud import CapacityType, OwnerTags

GCE_KEY = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
GCE_VALUE = re.compile(r"^[a-z0-9_-]{0,63}$")


def gce_valid(out: dict[str, str]) -> bool:
    return all(GCE_KEY.match(k) and GCE_VALUE.match(v) for k, v in out.items())


def test_plain_values_read_the_same_in_the_console() -> None:
    tags = OwnerTags("prod-east", "h100-a", "a-0123456789abcdef", "0.1", CapacityType.RESERVED,
                     reservation="res-a3-1", request="team-a/train.v2", committed=True)
    out = labels.to_labels(tags)
    assert out == {
        "allset-cluster": "prod-east",
        "allset-node-group": "h100-a",
        "allset-attempt": "a-0123456789abcdef",
        "allset-part": "0_2e1",
        "allset-source": "reserved",
        "allset-reservation": "res-a3-1",
        "allset-request": "team-a_2ftrain_2ev2",
        "allset-committed": "true",
    }
    assert labels.from_labels(out) == tags


@given(st.text(max_size=300))
def test_any_value_round_trips_within_gce_rules(value: str) -> None:
    tags = OwnerTags("c", "g", "a", "0.0", CapacityType.ON_DEMAND, request=value)
    out = labels.to_labels(tags)
    assert gce_valid(out)
    assert labels.from_labels(out) == tags


def test_long_values_continue_in_numbered_keys() -> None:
    request = "a-very-long-namespace-name-for-a-team/" + "x." * 100
    tags = OwnerTags("c", "g", "a", "0.0", CapacityType.SPOT, request=request)
    out = labels.to_labels(tags)
    assert "allset-request-2" in out and gce_valid(out)
    assert labels.from_labels(out) == tags


def test_foreign_or_damaged_labels_are_not_ours() -> None:
    assert labels.from_labels({"team": "infra"}) is None
    good = labels.to_labels(OwnerTags("c", "g", "a", "0.0", CapacityType.ON_DEMAND))
    assert labels.from_labels({**good, "allset-part": "0_zz"}) is None
    assert labels.from_labels({**good, "allset-source": "borrowed"}) is None
    assert labels.from_labels({**good, "allset-cluster": ""}) is not None  # odd, but ours
    del good["allset-attempt"]
    assert labels.from_labels(good) is None


def test_filter_matches_the_stored_first_piece() -> None:
    assert labels.filter_for(cluster="prod", part="0.1") == (
        '(labels.allset-cluster = "prod") (labels.allset-part = "0_2e1")')


def test_the_deletion_mark_is_whole_epoch_seconds_and_never_guessed() -> None:
    tags = OwnerTags("c", "g", "a", "0.0", CapacityType.ON_DEMAND, committed=True,
                     deleting_since=1_800_000_123.0)
    out = labels.to_labels(tags)
    assert out["allset-deleting"] == "1800000123" and gce_valid(out)
    assert labels.from_labels(out) == tags
    assert labels.deleting_value(1_800_000_123.99) == "1800000123"
    for damaged in ("", "soon", "1.5", "-1"):
        read = labels.from_labels({**out, "allset-deleting": damaged})
        assert read is not None and read.deleting_since is None
