"""allset's Kubernetes API client keeps a connection for each caller that may be in a call
at once: beyond urllib3's pool (10 by default) every call opened, and then closed, a new
connection (a TLS handshake each, on both sides, against a real API server)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from provider.base.build import version
from provider.cli.serve import kube_client
from tests.fakes.kube import FakeKube


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return path


def connections_opened(api: client.ApiClient, url: str, callers: int) -> int:
    core = client.CoreV1Api(api)
    together = threading.Barrier(callers)
    errors: list[BaseException] = []

    def calls() -> None:
        try:
            for _ in range(10):
                together.wait(10)  # every caller in a call at once, round after round
                # Read to the end: only then can its connection serve another call.
                assert core.list_node(_preload_content=False).data
        except BaseException as err:  # a thread's failure must fail the test
            errors.append(err)
            together.abort()

    threads = [threading.Thread(target=calls) for _ in range(callers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    return int(api.rest_client.pool_manager.connection_from_url(url).num_connections)


def test_24_callers_at_once_open_at_most_24_connections(tmp_path: Path) -> None:
    with FakeKube() as kube:
        api = kube_client(kubeconfig(tmp_path / "kc.yaml", kube.url), connections=24,
                          component="controller")
        try:
            assert connections_opened(api, kube.url, 24) <= 24
        finally:
            api.close()


def test_the_pool_never_shrinks_below_the_clients_own_default(tmp_path: Path) -> None:
    with FakeKube() as kube:
        api = kube_client(kubeconfig(tmp_path / "kc.yaml", kube.url), connections=2,
                          component="controller")
        try:
            kept = api.configuration.connection_pool_maxsize  # the client's cpu_count * 5
            assert kept >= 2
            assert connections_opened(api, kube.url, kept) <= kept
        finally:
            api.close()


def test_its_requests_name_allset_the_replica_and_the_component(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The audit log and the API server's metrics tell allset's requests, and each
    replica's, apart by User-Agent (the client's own names only the OpenAPI generator)."""
    monkeypatch.setenv("POD_NAME", "allset-7d9f-x2")
    with FakeKube() as kube:
        api = kube_client(kubeconfig(tmp_path / "kc.yaml", kube.url), connections=2,
                          component="leader-election")
        try:
            client.CoreV1Api(api).list_node()
        finally:
            api.close()
        assert kube.agents == {f"allset/{version()} (allset-7d9f-x2) leader-election": 1}
