"""Where a worker's answers come from: the event ring and the engine's state snapshot, both read-only.

Both are attached lazily and re-attached when they change under us, so `ykshm web` can start before
the engine (or with only a ring made by `ykshm ring create`) and keeps serving across engine
restarts:

- `RingSource.get()` returns the current `RingReader`. When the reader reports
  `instance_changed()` (the engine restarted and replaced the ring) the next call attaches the new
  instance. The old reader is not closed: open streams still hold it, notice the change themselves,
  end with a last line and drop it.
- `SnapshotSource.doc()` returns the last consistent snapshot document, copied and parsed once per
  publish (keyed by the snapshot's generation). A replaced segment file (new inode) is re-attached.
- `RingWatcher` (a `StreamWatcher`, the one watcher both sources share; web.redis_source has the
  Redis one) is the one task per worker that learns of new events and wakes the streams waiting
  for them; idle streams cost nothing. It sleeps in FUTEX_WAIT on the ring header's wake word
  (one parked thread per worker) and the writer wakes it after each batch (`RingWriter.heartbeat`:
  the engine once per scheduling cycle). A writer that never wakes (wake word still 0) is polled
  every 5 ms as before; a waking one is also looked at every 50 ms in case it published and then
  stalled before its next heartbeat.

Missing sources raise `Unavailable` (503) with a message naming what is missing, and so does a
snapshot the engine marked unavailable (its state did not fit: engine.snapshot.unavailable_document),
so no state view serves an old state as the current one.
"""

from __future__ import annotations

import collections
import logging
import time
from typing import Any

import trio

from .errors import Unavailable

log = logging.getLogger("ykshm.web")

RETRY_SECONDS = 0.2
"""A missing ring is looked for again at most this often (per worker)."""


class RingSource:
    """The worker's handle on `/dev/shm/NAME.events`, attached on first use."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._reader: Any = None
        self._next_try = 0.0
        self._last_error = ""

    def _attach(self) -> Any:
        from shm import RingReader  # the cffi extension is loaded only in workers

        return RingReader.attach(self.name)

    def get(self) -> Any:
        """The current reader; re-attaches after an engine restart; `Unavailable` if there is no ring."""
        reader = self._reader
        if reader is not None:
            try:
                changed = reader.instance_changed()
            except Exception:  # a reader that cannot even read its header: treat as replaced
                changed = True
            if not changed:
                return reader
        now = time.monotonic()
        if reader is None and now < self._next_try:
            raise Unavailable(self._last_error)
        try:
            fresh = self._attach()
        except Exception as exc:  # RingNotFoundError, RingFormatError, a half-written header
            self._next_try = now + RETRY_SECONDS
            missing = isinstance(exc, FileNotFoundError)  # shm.RingNotFoundError is one
            if missing:
                self._last_error = (
                    f"Event ring {self.name!r} not found: no engine or `ykshm ring create` has made it"
                )
            else:
                self._last_error = f"Event ring {self.name!r} cannot be read: {exc}"
                if reader is not None:
                    # Replaced but the new one is not readable yet: keep answering from the old one.
                    return reader
            self._reader = None  # removed (`ykshm ring rm`): do not serve a deleted ring
            raise Unavailable(self._last_error) from None
        self._reader = fresh
        return fresh


def usable(doc: dict) -> dict:
    """`doc`, unless the engine published that its state could not be written (then 503, why)."""
    problem = doc.get("unavailable")
    if problem:
        raise Unavailable(str(problem.get("reason") or "The engine's state snapshot is unavailable"))
    return doc


class SnapshotSource:
    """The worker's handle on `/dev/shm/NAME.state` with a parsed-document cache."""

    CHECK_SECONDS = 0.5
    """Once attached, whether the segment file was replaced is looked at at most this often."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._reader: Any = None
        self._checked = 0.0
        self._generation = -1
        self._doc: dict | None = None
        self._cache: dict[Any, bytes] = {}

    def _ensure(self) -> None:
        now = time.monotonic()
        reader = self._reader
        if reader is not None:
            if now - self._checked < self.CHECK_SECONDS:
                return
            self._checked = now
            if not reader.instance_changed():
                return
            reader.close()  # replaced or removed: attach the new file, if any
        self._reader = None
        self._generation = -1
        self._doc = None
        self._cache.clear()
        from shm import SnapshotReader

        try:
            self._reader = SnapshotReader.attach(self.name)
        except Exception as exc:  # RingNotFoundError (no engine yet), RingFormatError
            log.debug("snapshot attach failed: %s", exc)
        self._checked = now

    def doc(self) -> dict:
        """The newest snapshot document; `Unavailable` when the engine has not published one."""
        self._ensure()
        reader = self._reader
        if reader is None:
            raise Unavailable(
                f"No scheduler state: the engine of instance {self.name!r} is not running "
                "(no state snapshot); only the event endpoints are served"
            )
        # The generation is one header word; the document is copied and parsed only after a publish.
        generation = reader.generation()
        if generation != self._generation or self._doc is None:
            doc = reader.read()
            if doc is None:
                raise Unavailable(
                    f"No scheduler state yet: the engine of instance {self.name!r} has not published it"
                )
            self._doc = doc
            self._generation = generation
            self._cache.clear()
        return usable(self._doc)

    def published_nano(self) -> int:
        self._ensure()
        if self._reader is None:
            return 0
        try:
            return int(self._reader.published_nano())
        except Exception:
            return 0

    def cached(self, key: Any, build) -> bytes:
        """Serialized answer for `key`, built once per published snapshot."""
        doc = self.doc()
        body = self._cache.get(key)
        if body is None:
            body = build(doc)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[key] = body
        return body


class StreamWatcher:
    """The one task per worker that learns of new events and wakes the streams waiting for them;
    idle streams cost nothing. What "new" means and how to wait for it is the source's
    (`_news`): the ring's futex here, Redis's XREAD BLOCK in web.redis_source. The rest (waking,
    the waiting side of streams, the publish rate) is this class's, once for both."""

    def __init__(self) -> None:
        self._event = trio.Event()
        self.highest = -1
        self.running = False
        self._listeners: list[Any] = []
        self._samples: collections.deque[tuple[float, int]] = collections.deque(maxlen=16)

    async def _news(self) -> int | None:
        """Wait a little for news: the highest event id to announce, or None (nothing new)."""
        raise NotImplementedError

    async def _after_fire(self) -> None:
        """What to do after waking the streams, before the next look (nothing by default)."""

    def _progress(self) -> int:
        """The highest event id the publish rate is sampled from."""
        return self.highest

    def _fire(self, highest: int) -> None:
        self.highest = highest
        self._event.set()
        self._event = trio.Event()
        for poke in self._listeners:
            poke()

    async def run(self) -> None:
        self.running = True
        next_sample = 0.0
        try:
            while True:
                highest = await self._news()
                if highest is not None:
                    self._fire(highest)
                now = time.monotonic()
                if now >= next_sample:
                    self._samples.append((now, self._progress()))
                    next_sample = now + 1.0
                if highest is not None:
                    await self._after_fire()
        finally:
            self.running = False

    def subscribe(self, poke) -> None:
        """Call `poke()` at every fire (the hub of web.hub: one wake for all its streams)."""
        self._listeners.append(poke)

    async def wait_beyond(self, next_id: int, timeout: float) -> None:
        """Return when an event with id >= next_id may exist, or after `timeout` seconds."""
        if not self.running:
            await trio.sleep(min(timeout, 0.005))
            return
        if self.highest >= next_id:
            # Published but not readable yet (or a reader of an older instance): do not spin.
            await trio.sleep(0.001)
            return
        event = self._event
        with trio.move_on_after(timeout):
            await event.wait()

    def events_per_second(self) -> float:
        """Publish rate over the last ~15 s of samples (0 before two samples)."""
        if len(self._samples) < 2:
            return 0.0
        (t0, h0), (t1, h1) = self._samples[0], self._samples[-1]
        if t1 <= t0 or h1 < h0:
            return 0.0
        return (h1 - h0) / (t1 - t0)


class RingWatcher(StreamWatcher):
    """The watcher of the shared-memory ring: FUTEX_WAIT on the header's wake word."""

    POLL_SECONDS = 0.005
    """How often a ring whose writer never wakes readers is looked at."""

    FALLBACK_SECONDS = 0.05
    """The longest a wait on a waking writer's futex lasts before the header is looked at anyway."""

    LINGER_SECONDS = 0.010
    """After a fire, the least time before the next one: what a stream waits at most for the events
    published meanwhile to go out in one write. Measured with `bench web` (100 streams at 1,000
    events/s, 2 workers, the direct path of web.hub): 3 ms -> p50 2.1 / p99 5 ms / 2.1 us of web CPU
    per delivered event, 6 ms -> 3.6 / 7-8 / 1.1-1.3, 10 ms -> 5.8 / 12 / 0.8-1.1, 12 ms -> p50 7.3 /
    p99 14 / 0.83 read by the client (Redis in the same runs: ~0.9-1.4 us, p50 10-21 ms). 10 ms is
kept: at 12 ms a quiet-machine run had p99 13.9 against Redis's 13.5 (ratio 1.03), with CPU at
0.70 of Redis's; at 10 ms both stay under Redis's (`ykshm bench web --peer-redis`). What a
    write costs, kernel included, is most of the CPU per delivered event (py-spy: ~75 % of a
    worker's time is inside `os.write`), so fewer, fuller writes are what saves it; the first
    event after a quiet spell is not delayed."""

    ROUND_CAP_SECONDS = 0.1
    """The longest the watcher waits for the streams of the last fire to finish their round."""

    def __init__(self, ring: RingSource) -> None:
        super().__init__()
        self._ring = ring

    def _look(self) -> tuple[Any, int, int]:
        """(reader, wake word read BEFORE the bounds, so a wake after the look is never missed,
        highest event id); (None, 0, highest) without a ring."""
        try:
            reader = self._ring.get()
            seen = reader.wake_seq()
            bounds = reader.bounds()
        except Exception:
            return None, 0, self.highest
        return reader, seen, -1 if bounds is None else bounds[1]

    async def _news(self) -> int | None:
        reader, seen, highest = self._look()
        if highest != self.highest:
            return highest
        if reader is not None and seen:
            await trio.to_thread.run_sync(reader.wait_for_wake, seen, self.FALLBACK_SECONDS,
                                          abandon_on_cancel=True)
        else:
            await trio.sleep(self.POLL_SECONDS)
        return None

    async def _after_fire(self) -> None:
        """Let the streams woken by the last fire send before the next fire: wait LINGER_SECONDS,
        then until every other task of the worker is blocked (the round is done), at most
        ROUND_CAP_SECONDS. The next fire then carries everything published meanwhile in one send
        per stream, so the sends per second follow the worker's speed, not the publish rate."""
        import trio.testing

        await trio.sleep(self.LINGER_SECONDS)
        with trio.move_on_after(self.ROUND_CAP_SECONDS):
            await trio.testing.wait_all_tasks_blocked()
