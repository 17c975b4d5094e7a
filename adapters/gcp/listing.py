"""Walking aggregated lists: every page, merged per zone, on the raw protobuf messages.

The pager yields a ``zones/<zone>`` key once per page, so a zone spread over several pages
must be merged, never ``dict()``-ed. Items are read from the raw protobuf under each
proto-plus page (``Type.pb(page)``): for 10,000 instances, attribute access through
proto-plus costs more than the whole listing otherwise does."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, cast

from google.api_core import exceptions as gexc

from adapters.gcp.discovery import RawInstance, last
from adapters.gcp.errors import TRANSPORT_ERRORS, from_api_error, from_transport
from provider.domain.cloud import TransientError


def walk(pages: Iterable[Any], field: str, in_region: Callable[[str], bool],
         what: str) -> tuple[list[Any], int]:
    """Every ``field`` item of every zone of every page, and the number of pages (calls).
    A zone of our region that GCE could not reach fails the whole listing: a partial view
    would look as if instances had vanished and reservations had emptied."""
    items: list[Any] = []
    count = 0
    try:
        for page in pages:
            count += 1
            raw = type(page).pb(page)
            unreachable = [last(z) for z in raw.unreachables]
            for scope, scoped in raw.items.items():
                if not scope.startswith("zones/"):
                    continue
                if scoped.HasField("warning") and scoped.warning.code == "UNREACHABLE":
                    unreachable.append(last(scope))
                items.extend(getattr(scoped, field))
            ours = sorted(z for z in unreachable if in_region(z))
            if ours:
                raise TransientError(f"{what}: zones unreachable: {', '.join(ours)}",
                                     cloud_code="UNREACHABLE")
    except gexc.GoogleAPICallError as err:
        raise from_api_error(err) from err
    except TRANSPORT_ERRORS as err:
        raise from_transport(err, mutating=False, what=what) from err
    return items, count


def raw_instances(items: list[Any]) -> list[RawInstance]:
    return cast(list[RawInstance], items)
