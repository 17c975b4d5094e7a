"""bench/scale's account of where the time went, from audit log lines."""

from __future__ import annotations

import json

from bench.scale_stages import allset_delays, milestones, read_audit, render

ALLSET, KWOK = "system:serviceaccount:allset:allset", "e2e-kwok"
T0 = 1_800_000_000.0


def line(at: float, user: str, verb: str, resource: str, name: str,
         subresource: str = "") -> bytes:
    stamp = f"2027-01-15T08:00:{at:09.6f}Z"
    ref = {"resource": resource, "name": name, **({"subresource": subresource}
                                                 if subresource else {})}
    return json.dumps({"stage": "RequestReceived", "requestReceivedTimestamp": stamp,
                       "user": {"username": user}, "verb": verb, "objectRef": ref}).encode()


def epoch(at: float) -> float:
    return read_audit([line(at, "u", "get", "x", "y")])[0].at


def test_a_requests_stages_and_allsets_own_waits() -> None:
    lines = [
        line(1.0, ALLSET, "update", "provisioningrequests", "job-1", "status"),  # Accepted
        line(2.0, ALLSET, "update", "provisioningrequests", "job-1", "status"),  # launched
        line(5.0, KWOK, "patch", "nodes", "n1", "status"),   # Ready
        line(5.5, ALLSET, "patch", "nodes", "n1"),           # labelled
        line(9.0, KWOK, "patch", "nodes", "n2", "status"),
        line(6.0, ALLSET, "patch", "nodes", "n2"),           # labelled before Ready
        line(9.5, ALLSET, "update", "provisioningrequests", "job-1", "status"),  # done
        line(20.0, KWOK, "patch", "nodes", "n1", "status"),  # a heartbeat: not Ready
        line(21.0, ALLSET, "patch", "nodes", "n1"),          # a later patch: not labelled
        line(3.0, ALLSET, "update", "provisioningrequests", "job-2", "status"),
        b'{"half a line',
    ]
    audited = read_audit(lines)
    assert len(audited) == 10
    created = {"job-1": epoch(0.5), "job-2": epoch(0.5)}
    registered = {"n1": epoch(4.0), "n2": epoch(5.0)}
    nodes_of = {"job-1": ["n1", "n2"], "job-2": []}
    stages = milestones(audited, allset=ALLSET, kwok=KWOK, created=created,
                        registered=registered, nodes_of=nodes_of)
    start = epoch(0.0)
    job1 = {k: round(v - start, 3) for k, v in stages["job-1"].items()}
    assert job1 == {"created": 0.5, "accepted": 1.0, "launched": 2.0, "registered": 5.0,
                    "ready": 9.0, "labelled": 6.0, "provisioned": 9.5}
    # Accepted only: never launched, no gang.
    assert {k: round(v - start, 3) for k, v in stages["job-2"].items()} == {
        "created": 0.5, "accepted": 3.0}
    delays = allset_delays(stages, registered=registered, audited=audited, allset=ALLSET,
                           nodes_of=nodes_of)
    assert [round(d, 3) for d in delays["accept"]] == [0.5, 2.5]
    assert sorted(round(d, 3) for d in delays["label"]) == [1.0, 1.5]
    assert [round(d, 3) for d in delays["provision"]] == [0.5]  # after the last Ready
    text = "\n".join(render(stages, start, delays))
    assert "provisioned     9.5    9.5    9.5   (1 requests)" in text
    assert "accepted        2.0    3.0    3.0   (2 requests)" in text
