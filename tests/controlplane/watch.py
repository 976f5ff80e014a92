"""A small informer for the tests' own controllers: list, then watch from the list's
resourceVersion, re-list on any trouble. The tests' side of the API (autotune's is under test)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import requests

from tests.controlplane.cluster import Admin, ApiFailure

Obj = dict[str, Any]


class Informer:
    """Calls ``handle(event_type, obj)`` for every object of ``path`` (a collection) as it is
    listed (``SYNC``) and as it changes (``ADDED``, ``MODIFIED``, ``DELETED``), in a thread."""

    def __init__(self, admin: Admin, path: str, handle: Callable[[str, Obj], None],
                 name: str) -> None:
        self.admin, self.path, self.handle = admin, path, handle
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.errors: list[str] = []
        self._response: requests.Response | None = None

    def start(self) -> Informer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        # A blocked read does not always wake up on close: the thread is a daemon and ends at
        # its watch's server-side timeout (5 s) at the latest; nothing waits for it.
        self.thread.join(timeout=0.1)

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                listed = self.admin.request("GET", self.path)
                version = listed["metadata"]["resourceVersion"]
                for obj in listed.get("items") or []:
                    self.handle("SYNC", obj)
                self._watch(version)
            except (ApiFailure, requests.RequestException, ValueError, KeyError, OSError,
                    AttributeError) as e:
                if self.stopped.is_set():
                    return
                self.errors.append(str(e))
                time.sleep(0.2)

    def _watch(self, version: str) -> None:
        while not self.stopped.is_set():
            response = self.admin.session.get(
                self.admin.url + self.path, stream=True, timeout=(5, 10),
                params={"watch": "true", "resourceVersion": version, "timeoutSeconds": "5",
                        "allowWatchBookmarks": "true"})
            if response.status_code != 200:
                return
            self._response = response
            if self.stopped.is_set():
                response.close()
                return
            try:
                for line in response.iter_lines():
                    if self.stopped.is_set():
                        return
                    if not line:
                        continue
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        return  # 410 and friends: list again
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if event.get("type") != "BOOKMARK":
                        self.handle(str(event["type"]), obj)
            finally:
                response.close()
