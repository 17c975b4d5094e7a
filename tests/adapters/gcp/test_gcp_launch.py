"""Names and request ids of a bulkInsert part."""

from __future__ import annotations

import re
import uuid

from hypothesis import given
from hypothesis import strategies as st

from adapters.gcp.launch import name_pattern, request_id

GCE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_LABEL = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", fullmatch=True)


@given(DNS_LABEL, DNS_LABEL, st.text(min_size=1, max_size=80))
def test_every_name_of_a_part_is_a_valid_gce_name(cluster: str, group: str,
                                                  token: str) -> None:
    pattern = name_pattern(cluster, group, token)
    assert pattern.count("####") == 1
    assert GCE_NAME.match(pattern.replace("####", "0042"))


def test_parts_get_their_own_names() -> None:
    assert name_pattern("c", "g", "a-1/0.0") != name_pattern("c", "g", "a-1/0.1")
    assert name_pattern("c", "9gpu", "t").startswith("c-9gpu-")
    assert name_pattern("0c", "g", "t").startswith("n0c-g-")


def test_request_ids_are_uuids_fixed_by_token_and_generation() -> None:
    first = request_id("proj", "a-1/0.0")
    assert uuid.UUID(first).version == 5
    assert request_id("proj", "a-1/0.0") == first
    assert request_id("proj", "a-1/0.1") != first
    assert request_id("proj", "a-1/0.0", generation=1) != first
    assert request_id("other", "a-1/0.0") != first
