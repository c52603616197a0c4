"""The response cache: an append-only JSONL file, one line per chat completion received.

A response is keyed by the digest of its request body (model, messages and decoding settings), so the
same question is never paid for twice. Each line is flushed and fsynced as it is written: a collection
killed at any moment loses at most the responses in flight, and its torn last line (if any) is cut
off when the cache is opened again. Provider errors are not cached, so a rerun asks again.
``CachedEndpoint`` adds in-flight sharing: concurrent identical requests make one HTTP call.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from data_prep.canonical import StrictJSONError, digest, dumps_canonical, loads_strict
from data_prep.teacher_client.endpoint import ChatEndpoint, Reply

CACHE_DOMAIN = "ledgerwright-teacher-request/v1"


class CacheError(ValueError):
    """A cache file that cannot be used: ``file:line: field: problem``."""


def request_key(body: dict) -> str:
    """The cache key of a request body: a domain-separated canonical digest."""
    return digest(CACHE_DOMAIN, body)


class ResponseCache:
    """``key -> response body``, loaded from and appended to ``path``; the first line of a key wins."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.entries: dict[str, dict] = {}
        self.torn_tail = 0
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._load()
        self._fh = open(self.path, "a", encoding="utf-8", newline="\n")

    def _load(self) -> None:
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        end = data.rfind(b"\n") + 1
        if end < len(data):  # killed mid-write: drop the partial line so appends stay line-aligned
            self.torn_tail = len(data) - end
            with open(self.path, "r+b") as fh:
                fh.truncate(end)
            data = data[:end]
        for lineno, raw in enumerate(data.split(b"\n")[:-1], start=1):
            if not raw.strip():
                continue
            try:
                rec = loads_strict(raw)
            except StrictJSONError as exc:
                raise CacheError(
                    f"{self.path}:{lineno}: {exc.path}: {exc.problem} (delete the cache file to start over)"
                ) from None
            if (
                not isinstance(rec, dict)
                or not isinstance(rec.get("key"), str)
                or not isinstance(rec.get("response"), dict)
            ):
                raise CacheError(
                    f"{self.path}:{lineno}: $: expected an object with key (string) and response (object)"
                )
            self.entries.setdefault(rec["key"], rec["response"])

    def get(self, key: str) -> dict | None:
        with self._lock:
            return self.entries.get(key)

    def put(self, key: str, response: dict) -> None:
        """Append and fsync (a no-op when ``key`` is already cached)."""
        with self._lock:
            if key in self.entries:
                return
            self._fh.write(dumps_canonical({"key": key, "response": response}) + "\n")
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self.entries[key] = response

    def __len__(self) -> int:
        return len(self.entries)

    def close(self) -> None:
        with self._lock:
            self._fh.close()


@dataclass
class Answer:
    """A request's outcome for the collector: the reply and whether it came from the cache."""

    key: str
    reply: Reply
    cached: bool


class CachedEndpoint:
    """Cache in front of an endpoint; identical requests in flight share one HTTP call."""

    def __init__(self, endpoint: ChatEndpoint, cache: ResponseCache):
        self.endpoint = endpoint
        self.cache = cache
        self._lock = threading.Lock()
        self._inflight: dict[str, Future] = {}
        self.fetched = 0
        self.hits = 0

    def complete(self, body: dict, *, tag: str) -> Answer:
        key = request_key(body)
        with self._lock:
            hit = self.cache.get(key)
            if hit is not None:
                self.hits += 1
                return Answer(key, Reply(hit, None, 0), True)
            fut = self._inflight.get(key)
            owner = fut is None
            if owner:
                fut = Future()
                self._inflight[key] = fut
        if not owner:
            return fut.result()
        try:
            reply = self.endpoint.post(body, key=key, tag=tag)
            if reply.ok:
                self.cache.put(key, reply.body)
            with self._lock:
                self.fetched += 1
            answer = Answer(key, reply, False)
            fut.set_result(answer)
            return answer
        except BaseException as exc:
            fut.set_exception(exc)
            raise
        finally:
            with self._lock:
                self._inflight.pop(key, None)
