"""The controller's Kubernetes API handle for one incarnation: the real KubeApi over HTTP
to the fake API server, with a yield point before every call; after a crash every call
raises Crashed, so a dead controller never writes again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from provider.controller.kube import KubeApi
from tests.adversary.sched import Crashed, yield_point

# Not calls to the API server: how the controller sets its handle up (before it is alive).
CONFIGURING = frozenset({"fence_with"})


class GatedKube:
    def __init__(self, api: KubeApi, alive: Callable[[], bool]) -> None:
        self.__dict__["_api"] = api
        self.__dict__["_alive"] = alive

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._api, name)
        if not callable(value) or name.startswith("_") or name in CONFIGURING:
            return value
        alive = self._alive

        def gated(*args: Any, **kwargs: Any) -> Any:
            if not alive():
                raise Crashed
            yield_point(f"kube.{name}")
            if not alive():
                raise Crashed
            return value(*args, **kwargs)

        return gated

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._api, name, value)  # e.g. the served version the controller picks
