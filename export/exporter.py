"""The exporter's loop: follow the ring with a cursor, XADD every event, resume, never wait on the engine.

Rules
1. The exporter only reads /dev/shm (RingReader, SnapshotReader: read-only mappings). Nothing it
   does, Redis being down or slow included, can make the engine wait.
2. Exactly once, in order: event E of the generation-G instance is the stream entry `G-E`. Redis
   refuses an ID that is not above the stream's top, so an event sent twice is refused by Redis
   itself (counted as a duplicate, not an error).
3. Resume: after start-up and after every failure the exporter reads the stream's last ID and puts
   its cursor right after it. A failure in the middle of a batch, a restart of the exporter, a
   Cluster failover that lost acknowledged writes: all end in the same re-read, so the stream
   catches up with the ring from wherever Redis really is.
4. Gaps: when the ring overwrote events before the exporter read them (Redis was down long
   enough), the cursor says which ids were lost; the exporter writes one gap entry `G-first` with
   field `gap` = "first-last" and the time, and counts them. Never a silent hole.
5. A new engine instance (the ring was replaced, ids restart at 0) gets the next generation,
   allocated atomically in Redis (a Lua script over keys of one slot), after the old ring's last
   events are drained from the exporter's still-open mapping of it.
6. Replicas (`leader_only`, `redis_name`): the exporters of an active/standby pair write one
   history under one name. Each exports its engine only once a shim has registered with it (the
   engine's snapshot names an RM): a standby's idle engine writes nothing, so generations are
   handed out in the order the replicas came to lead, and a reader of the stream sees each
   leader's events, under its InstanceUUID, after its predecessor's. The events its engine wrote
   while idle are exported then (the ring holds them); a deposed leader's events written after
   its successor's first are refused as an old generation's (rule 5's StaleRing).
7. Failures: every Redis error becomes a one-line reason in the log and the status; the exporter
   retries with backoff (0.1 s doubling to 5 s) and resumes by rule 3.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import time
from typing import Any

import orjson
import redis.exceptions as rex

from common.backoff import Backoff

from .keys import GAP_FIELD, Keys, gap_value, parse_stream_id, stream_id
from .redisauth import RedisAuth
from .redisconn import BulkPipe, Link, RedisProblem, bulk, describe, redact, wait_command
from .retention import Retention, xadd_head
from .state import StateExporter
from .status import (STATUS_SECONDS, ExportStatus, StatusFileRefused, read_file, valid_generation,
                     write_file)

log = logging.getLogger("ykshm.export")

BACKOFF_FIRST = 0.1
BACKOFF_MAX = 5.0
INSTANCE_CHECK_SECONDS = 0.1

# Generation of an engine instance: looked up, or the next one after every generation handed out,
# after the stream's own last ID (the hash may have been deleted while the stream was kept) and
# after ARGV[2], the highest generation this host's exporter has used (Redis may have lost all).
GENERATION_LUA = """
local g = redis.call('HGET', KEYS[1], 'uuid:' .. ARGV[1])
if g then return tonumber(g) end
local top = tonumber(redis.call('HGET', KEYS[1], 'top') or '0')
if tonumber(ARGV[2]) > top then top = tonumber(ARGV[2]) end
if redis.call('EXISTS', KEYS[2]) == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[2])
  for i = 1, #info, 2 do
    if info[i] == 'last-generated-id' then
      local last = tonumber(string.match(info[i + 1], '^(%d+)'))
      if last > top then top = last end
    end
  end
end
top = top + 1
redis.call('HSET', KEYS[1], 'uuid:' .. ARGV[1], top, 'gen:' .. top, ARGV[1], 'top', top)
return top
"""

# The instances hash rebuilt for one instance whose generation we know otherwise: ARGV[2].
ADOPT_LUA = """
local top = tonumber(redis.call('HGET', KEYS[1], 'top') or '0')
local g = tonumber(ARGV[2])
if g > top then top = g end
redis.call('HSET', KEYS[1], 'uuid:' .. ARGV[1], g, 'gen:' .. g, ARGV[1], 'top', top)
return g
"""


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    name: str = "ykshm"
    url: str = "redis://127.0.0.1:6379/0"
    maxlen: int = 0
    max_age: float = 0.0
    state_interval: float = 1.0
    batch: int = 2000
    idle_sleep: float = 0.001
    auth: RedisAuth | None = None   # password and CA, never in `url` (export.redisauth)
    wait_replicas: int = 0          # a batch counts once this many replicas have it (WAIT)
    wait_timeout_ms: int = 1000
    redis_name: str = ""            # the name of the keys in Redis ("": `name`)
    leader_only: bool = False       # export an engine only once a shim registered with it



@dataclasses.dataclass(frozen=True, slots=True)
class _Batch:
    """A batch sent and not yet acknowledged: what to count once its replies are in."""

    generation: int
    first: int                      # event ids first..end-1
    end: int
    lost: tuple[int, int] | None    # the gap entry sent ahead of them, if any
    oldest_nano: int                # timestampNano of the first event (lag)
    commands: int


def _previous_generations(name: str) -> dict[str, int]:
    """{instance uuid: generation} from the status file an earlier exporter of NAME left (none
    from a file that is refused: it would be written into Redis as this instance's generation)."""
    try:
        doc = read_file(name) or {}
    except StatusFileRefused as exc:
        log.warning("%s: not adopting a generation from it", exc)
        return {}
    uuid, generation = doc.get("instance_uuid"), valid_generation(doc.get("generation"))
    return {uuid: generation} if isinstance(uuid, str) and uuid and generation else {}


class CorruptGeneration(Exception):
    """Redis holds, for this instance, a generation that is not an integer 1..2^53; `str()` says
    which field and how to clear it (the exporter never guesses over what consumers' cursors
    may name)."""


class StaleRing(Exception):
    """The stream already holds a newer generation than this ring's instance (an old ring)."""


class Exporter:
    """One exporter: `run(stop)` until `stop()` returns True."""

    def __init__(self, options: ExportOptions, link: Link | None = None) -> None:
        self.options = options
        self.keys = Keys.for_instance(options.redis_name or options.name)
        self.link = link
        self.status = ExportStatus(redis=redact(options.url))
        self._reader: Any = None
        self._cursor: Any = None
        self._generation = 0
        self._head = xadd_head(self.keys.events.encode(), options.maxlen, fields=1)
        self._gap_head = xadd_head(self.keys.events.encode(), options.maxlen, fields=2)
        self._state = StateExporter(options.name, self.keys.state, options.state_interval)
        self._retention = Retention(self.keys.events, options.max_age)
        self._backoff = Backoff(BACKOFF_FIRST, BACKOFF_MAX)
        self._retry_at = 0.0
        self._next_status = 0.0
        self._next_redis_status = 0.0
        self._next_instance_check = 0.0
        self._bulk: BulkPipe | None = None
        self._inflight: collections.deque[_Batch] = collections.deque()
        self._previous = _previous_generations(options.name)

    # -- the loop ---------------------------------------------------------------------------

    def run(self, stop) -> None:
        self.status.pid = os.getpid()
        try:
            while not stop():
                self.step()
            self._drain()
        finally:
            self.status.state = "stopped"
            self.status.connected = False
            self._publish_status(time.monotonic(), force=True)
            self._state.close()
            if self._reader is not None:
                self._reader.close()
            if self._bulk is not None:
                self._bulk.close()
            if self.link is not None:
                self.link.close()

    def step(self) -> int:
        """One round: (re)connect if needed, export one batch or sleep a little; returns events sent."""
        now = time.monotonic()
        self._publish_status(now)
        if now < self._retry_at:
            time.sleep(min(0.05, self._retry_at - now))
            return 0
        try:
            if self._cursor is None and not self._resume():
                time.sleep(0.05)
                return 0
            sent = self._export_batch()
            self._state_and_retention(now)
            self._status_to_redis(now)
        except RedisProblem as exc:
            self._failed(str(exc))
            return 0
        except (rex.RedisError, OSError) as exc:
            self._failed(describe(exc))
            return 0
        except StaleRing as exc:
            self._failed(str(exc))
            return 0
        self._backoff.reset()
        if sent == 0 and not self._inflight:
            if now >= self._next_instance_check:
                self._next_instance_check = now + INSTANCE_CHECK_SECONDS
                if self._reader.instance_changed():
                    self._switch_instance()
                    return 0
            time.sleep(self.options.idle_sleep)
        return sent

    def _drain(self) -> None:
        """At the end: take the replies of the batches still in flight, so the status is exact."""
        try:
            while self._inflight:
                self._commit(self._inflight.popleft())
        except (RedisProblem, rex.RedisError, OSError) as exc:
            log.info("stopping: replies of the last batch not read (%s); the next start re-reads "
                     "the stream's last ID", exc)

    def _failed(self, reason: str) -> None:
        delay = self._backoff.next()
        if reason != self.status.last_error or self.status.state != "retrying":
            log.warning("Redis %s: %s; retrying in %.1f s", self.status.redis, reason, delay)
        self.status.failed(reason)
        self._cursor = None            # rule 3: resume from the stream's last ID
        self._inflight.clear()
        if self._bulk is not None:
            self._bulk.close()
            self._bulk = None
        self._state.forget()
        self._retry_at = time.monotonic() + delay
        self._publish_status(time.monotonic(), force=True)

    # -- ring -------------------------------------------------------------------------------

    def _attach(self) -> bool:
        from shm import RingReader
        from shm.errors import ShmError

        if self._reader is not None:
            return True
        try:
            self._reader = RingReader.attach(self.options.name)
        except ShmError:
            if self.status.state != "waiting_for_ring":
                log.info("waiting for the event ring /dev/shm/%s.events", self.options.name)
            self.status.state = "waiting_for_ring"
            return False
        return True

    def _leads(self) -> bool:
        """Rule 6: without `leader_only`, always; with it, once the engine's snapshot names an
        RM (a shim registered: this replica leads)."""
        if not self.options.leader_only:
            return True
        doc = self._state.document()
        if isinstance(doc, dict) and (doc.get("engine") or {}).get("rmIDs"):
            return True
        if self.status.state != "waiting_for_leader":
            log.info("waiting for a shim to register with engine %s (a standby's engine is not "
                     "exported)", self.options.name)
        self.status.state = "waiting_for_leader"
        return False

    def _switch_instance(self) -> None:
        """The old instance is drained (rule 5): follow the new ring, if there is one yet."""
        log.info("engine instance %s ended at event %d; following the new instance",
                 self.status.instance_uuid, self.status.last_event_id)
        self._reader.close()
        self._reader = None
        self._cursor = None

    # -- Redis ------------------------------------------------------------------------------

    def _connect(self) -> None:
        if self.link is None:
            self.link = Link.open(self.options.url, self.keys.events, self.options.auth)
        elif not self.status.connected:
            self.link.refresh()
        self.status.redis_node = self.link.where

    def _resume(self) -> bool:
        """Rule 3: connect, find this instance's generation and the stream's last ID, place the cursor."""
        if not self._attach() or not self._leads():
            return False
        self._connect()
        node = self.link.node
        uuid = self._reader.instance_uuid
        last_gen, last_seq = self._last_id(node)
        generation = self._generation_of(node, uuid, last_gen, last_seq)
        if last_gen > generation:
            raise StaleRing(f"the stream already holds generation {last_gen}, newer than this ring's "
                            f"instance {uuid} (generation {generation}); waiting for a newer engine")
        start = last_seq + 1 if last_gen == generation else 0
        self._cursor = self._reader.cursor(start)
        self._generation = generation
        self._previous[uuid] = generation
        st = self.status
        if not st.connected or st.instance_uuid != uuid:
            log.info("exporting instance %s as generation %d to %s (node %s) from event %d",
                     uuid, generation, st.redis, self.link.where, start)
        st.connected, st.state, st.instance_uuid, st.generation = True, "exporting", uuid, generation
        st.last_event_id = start - 1
        st.last_stream_id = stream_id(generation, start - 1).decode() if start else ""
        st.ring_capacity = int(self._reader.capacity)
        return True

    def _generation_of(self, node, uuid: str, last_gen: int, last_seq: int) -> int:
        """This instance's generation. Exactly once holds when Redis forgot part of what it knew:
        - the instances hash lost, the stream kept: the stream's last generation is ours if its
          entries are this ring's events (compared as JSON), and the hash is rebuilt;
        - everything lost (no stream): the generation this exporter used for the instance (in
          memory, or the status file of the last run), so consumer cursors `G-E` go on; the ring
          is exported again from its oldest event, a gap record naming what it no longer holds;
        - a new instance: the next generation after any this host or Redis has seen."""
        known = node.hget(self.keys.instances, f"uuid:{uuid}")
        if known is not None:
            generation = valid_generation(known)
            if generation is None:
                raise CorruptGeneration(
                    f"Redis {self.keys.instances} field uuid:{uuid} holds {known[:40]!r}, not a "
                    f"generation (an integer 1..2^53); remove it (HDEL {self.keys.instances} "
                    f"uuid:{uuid}) and the exporter picks the next generation")
            return generation
        adopt = None
        if last_gen and self._stream_holds_ring(node, last_gen, last_seq):
            adopt = last_gen
        elif not last_gen and self._previous.get(uuid):
            adopt = self._previous[uuid]
        if adopt is not None:
            log.warning("Redis had lost the generation of instance %s: it is %d again (%s)", uuid,
                        adopt, "from the stream" if last_gen else "Redis lost the stream too")
            return int(node.eval(ADOPT_LUA, 1, self.keys.instances, uuid, adopt))
        floor = max(self._previous.values(), default=0)
        return int(node.eval(GENERATION_LUA, 2, self.keys.instances, self.keys.events, uuid, floor))

    def _stream_holds_ring(self, node, gen: int, last_seq: int) -> bool:
        """Whether generation `gen`'s newest entries that the ring still holds equal the ring's."""
        bounds = self._reader.bounds()
        if bounds is None or last_seq > bounds[1] or last_seq < bounds[0]:
            return False
        entries = node.xrevrange(self.keys.events, f"{gen}-{last_seq}", f"{gen}-{bounds[0]}", count=16)
        for sid, fields in entries:
            if b"j" in fields:
                event_id = parse_stream_id(sid)[1]
                raw, n = self._reader.read_range_json(event_id, 1)
                return n == 1 and orjson.loads(raw)[0] == orjson.loads(fields[b"j"])
        return False

    def _last_id(self, node) -> tuple[int, int]:
        try:
            info = node.xinfo_stream(self.keys.events)
        except rex.ResponseError as exc:
            if "no such key" in str(exc).lower():
                return 0, 0
            raise
        return parse_stream_id(info["last-generated-id"])

    def _export_batch(self) -> int:
        """Send the next batch (if any) and take the replies of the one before it; events sent."""
        sent = self._send_batch()
        if self._inflight and (len(self._inflight) > 1 or not sent):
            self._commit(self._inflight.popleft())
        return sent

    def _send_batch(self) -> int:
        cursor = self._cursor
        got = cursor.poll_json(self.options.batch)
        if got.count == 0 and got.lost is None:
            return 0
        gen = self._generation
        end = cursor.next_id
        first = end - got.count
        head = self._head
        parts = []
        if got.lost is not None:
            parts.append(self._gap_head + bulk(stream_id(gen, got.lost[0])) + bulk(GAP_FIELD)
                         + bulk(gap_value(*got.lost)) + b"$2\r\nts\r\n" + bulk(b"%d" % time.time_ns()))
        oldest = 0
        if got.count:
            lines = got.lines.split(b"\n")
            oldest = orjson.loads(lines[0]).get("timestampNano", 0)
            parts.extend([
                b"%s$%d\r\n%d-%d\r\n$1\r\nj\r\n$%d\r\n%s\r\n" % (head, len(b"%d-%d" % (gen, i)), gen, i, len(line), line)
                for i, line in zip(range(first, end), lines)
            ])
        if self.options.wait_replicas:
            parts.append(wait_command(self.options.wait_replicas, self.options.wait_timeout_ms))
        self._pipe().send(b"".join(parts))
        self._inflight.append(_Batch(gen, first, end, got.lost, oldest, len(parts)))
        return got.count + (got.lost is not None)

    def _pipe(self) -> BulkPipe:
        if self._bulk is None:
            self._bulk = BulkPipe(self.link.node)
        return self._bulk

    def _commit(self, batch: "_Batch") -> None:
        """Rule 2: every reply is an ID or 'equal or smaller' (already there); anything else fails."""
        pipe = self._pipe()
        errors = pipe.receive(batch.commands)
        wanted = self.options.wait_replicas
        if wanted and not errors and int(pipe.last_reply) < wanted:
            # not on enough replicas yet: not counted; the retry re-sends from the stream's last
            # ID (the master refuses what it has) and waits again
            raise RedisProblem(f"only {pipe.last_reply} of {wanted} replicas acknowledged the "
                               f"batch within {self.options.wait_timeout_ms} ms (--wait-replicas)")
        duplicates = 0
        for err in errors:
            if "equal or smaller" in str(err):
                duplicates += 1
                continue
            raise RedisProblem(describe(err))
        now_ns = time.time_ns()
        st = self.status
        st.duplicates += duplicates
        st.batches += 1
        gen = batch.generation
        if batch.lost is not None:
            lo, hi = batch.lost
            st.gaps += 1
            st.events_lost += hi - lo + 1
            st.last_event_id = hi
            st.last_stream_id = stream_id(gen, lo).decode()
            log.warning("the ring overwrote events %d-%d before they were exported: gap record %s written",
                        lo, hi, st.last_stream_id)
        if batch.end > batch.first:
            st.exported += batch.end - batch.first - duplicates
            st.last_event_id = batch.end - 1
            st.last_stream_id = stream_id(gen, batch.end - 1).decode()
            if batch.oldest_nano:
                st.observe_lag(max(0.0, (now_ns - batch.oldest_nano) / 1e9))

    def _state_and_retention(self, now: float) -> None:
        node = self.link.node
        generation = self._state.maybe_export(node, self.status.instance_uuid, now)
        if generation is not None:
            self.status.state_generation = generation
            self.status.state_exported_nano = time.time_ns()
        self._retention.maybe_trim(node, now)

    # -- status -----------------------------------------------------------------------------

    def _publish_status(self, now: float, force: bool = False) -> None:
        if not force and now < self._next_status:
            return
        self._next_status = now + STATUS_SECONDS
        st = self.status
        reader = self._reader
        if reader is not None:
            try:
                bounds = reader.bounds()
                st.next_event_id = 0 if bounds is None else bounds[1] + 1
                st.lag_events = max(0, st.next_event_id - (st.last_event_id + 1))
                st.lag_ms = self._lag_ms(reader, st.last_event_id + 1) if st.lag_events else 0.0
                st.engine_pid = reader.writer_pid
                st.engine_alive = reader.writer_alive()
                st.engine_heartbeat_nano = reader.heartbeat_nano()
            except Exception as exc:  # a replaced ring: the next step notices it
                log.debug("status: cannot read the ring: %s", exc)
        st.updated_nano = time.time_ns()
        try:
            write_file(self.options.name, st)
        except OSError as exc:
            log.debug("status file: %s", exc)

    def _status_to_redis(self, now: float) -> None:
        """The status hash for replicas, every STATUS_SECONDS; also how an idle exporter notices
        that Redis went away (errors raise to `step`)."""
        if now < self._next_redis_status:
            return
        self._next_redis_status = now + STATUS_SECONDS
        node = self.link.node
        node.hset(self.keys.exporter, mapping=self.status.redis_fields())
        self._check_not_forgotten(node)

    def _check_not_forgotten(self, node) -> None:
        """A stream that ends before what Redis acknowledged to us lost entries (restarted empty,
        restored from an older backup, a failover that lost writes, deleted): resume, so the ring
        fills in what it still holds and a gap record names the rest."""
        ours = self.status.last_stream_id
        if not ours or self._inflight:
            return
        theirs = self._last_id(node)
        if theirs < parse_stream_id(ours):
            raise RedisProblem(f"Redis lost exported entries (its stream ends at "
                               f"{theirs[0]}-{theirs[1]}, we had {ours} acknowledged); resuming")

    @staticmethod
    def _lag_ms(reader, next_id: int) -> float:
        bounds = reader.bounds()
        if bounds is None:
            return 0.0
        events = reader.read_range(max(next_id, bounds[0]), 1)
        if not events or not events[0].timestamp_nano:
            return 0.0
        return max(0.0, (time.time_ns() - events[0].timestamp_nano) / 1e6)
