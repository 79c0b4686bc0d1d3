"""`/dev/shm/NAME.web`: what the web workers of one instance share — stream slots and metrics.

Why a segment of our own: with N hypercorn workers a limit such as maxStreams has to hold across
processes, and a Prometheus scrape lands on one worker but must report them all.

Layout (little-endian, fixed at creation; all offsets multiples of 8):

    header   4096 bytes   magic "YKWEB001", version, nslots, nregions, owner pid
    regions  NREGIONS x REGION_BYTES   one per worker process: pid, pid start time, then float64
                                      metric cells (request counts, latency histograms, stream
                                      opens/closes). A region has exactly one writer (its worker),
                                      so cells are updated without locks; readers sum all regions.
    slots    nslots x 64 bytes        one per open stream: pid, pid start time, peer address.

Concurrency — the simplest correct choice: slot acquire/release and region claim run under
`fcntl.flock(LOCK_EX)` on the segment file. The critical section is a scan of at most `nslots`
64-byte slots with no await inside, so one trio worker never contends with itself and workers wait
on each other for microseconds. Metric cells need no lock (single writer per region; 8-byte
aligned stores are atomic on the platforms we run on, a reader sees an old or a new value).

The file is created with O_EXCL, mode 0600; an existing one is used only if it is this user's
own regular file that nobody else may write (no symlink is followed): a file another local user
planted under the name is refused with an error naming it.

Leaks: a worker killed with SIGKILL cannot release its slots. Each slot and region records the
owner's pid and the pid's start time (from psutil, so a recycled pid is not mistaken for the owner);
every acquire first frees slots whose owner is gone, and the supervisor frees a dead worker's
slots as soon as it reaps it. A dead worker's metric region is taken over by the next worker that
starts, which keeps adding to it: the summed counters stay monotonic across worker restarts.
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
from collections.abc import Callable, Iterator, Sequence

import psutil

from shm.segment import trust_problem

MAGIC = b"YKWEB001"
VERSION = 1
HEADER_BYTES = 4096
NREGIONS = 64
REGION_BYTES = 16384
REGION_HEADER = 16  # pid (q), pid start time (q)
REGION_CELLS = (REGION_BYTES - REGION_HEADER) // 8
SLOT_BYTES = 64
SLOT_HOST_MAX = 42  # bytes of the peer address kept (an IPv6 text address is at most 39)
_SLOT = struct.Struct("<qqiH42s")  # pid, pid start time, region, host length, host: 64 bytes
_HOST_AT = 20  # offset of the host length in a slot
_HEADER = struct.Struct("<8sIIIq")  # magic, version, nslots, nregions, owner pid

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx")
CLOSE_REASONS = (
    "client_closed",  # the client went away (EOF / reset / TCP_USER_TIMEOUT on a stalled peer)
    "lapped",  # the cursor was overwritten before the client read it
    "instance_changed",  # the engine restarted; the ring is a new instance
    "shutdown",  # the worker is stopping
    "error",  # a bug (logged)
)


class SegmentError(Exception):
    """The segment is missing, malformed, or owned by another live `ykshm web`."""


_TICKS = os.sysconf("SC_CLK_TCK")
_GONE = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def _proc_state(pid: int) -> tuple[str, int]:
    """(psutil status, kernel start time in clock ticks since boot) of a process; ("", 0) if it
    does not exist. The start time is psutil's create time less the boot time, in ticks: the
    kernel's own number, the same in every process (a wall-clock time would move with the clock)."""
    if pid <= 0:
        return "", 0
    try:
        proc = psutil.Process(pid)
        with proc.oneshot():
            status, started = proc.status(), proc.create_time()
        return status, round((started - psutil.boot_time()) * _TICKS)
    except psutil.Error:
        return "", 0


def pid_start_time(pid: int) -> int:
    """The kernel start time of a process (clock ticks since boot), 0 if it does not exist."""
    return _proc_state(pid)[1]


def pid_alive(pid: int, start: int) -> bool:
    """True if `pid` exists and is the same process that recorded `start`."""
    state, now = _proc_state(pid)
    # A zombie still exists as a process; it holds no sockets any more, so count it as dead.
    return now != 0 and now == start and state not in _GONE


class MetricLayout:
    """Where each metric cell lives inside a region; built from the route names, same in every worker."""

    def __init__(self, route_names: Sequence[str]) -> None:
        self.route_names = tuple(route_names)
        self.route_index = {name: i for i, name in enumerate(self.route_names)}
        self.per_route = len(STATUS_CLASSES) + len(LATENCY_BUCKETS) + 1 + 1  # +Inf bucket, sum
        cell = 0
        self.route_base = cell
        cell += self.per_route * len(self.route_names)
        self.streams_opened = cell
        cell += 1
        self.streams_rejected = cell  # 503 Too many streaming connections
        cell += 1
        self.streams_closed = cell
        cell += len(CLOSE_REASONS)
        self.streams_direct = cell  # served on the raw socket by web.direct, not through hypercorn
        cell += 1
        self.total_cells = cell
        if cell > REGION_CELLS:
            raise ValueError("too many routes for the metrics region")

    def status_cell(self, route: int, status: int) -> int:
        klass = min(max(status // 100 - 2, 0), 3)
        return self.route_base + route * self.per_route + klass

    def bucket_cell(self, route: int, bucket: int) -> int:
        return self.route_base + route * self.per_route + len(STATUS_CLASSES) + bucket

    def sum_cell(self, route: int) -> int:
        return self.route_base + route * self.per_route + self.per_route - 1


class WebSegment:
    """One process's handle on `/dev/shm/NAME.web` (created by `ykshm web` or the first worker)."""

    def __init__(self, path: str, fd: int, mm: mmap.mmap, nslots: int) -> None:
        self.path = path
        self._fd = fd
        self._mm = mm
        self.nslots = nslots
        self.region: int | None = None
        self._region_view: memoryview | None = None

    # -- life cycle ---------------------------------------------------------------------------

    @staticmethod
    def path_for(name: str) -> str:
        return f"/dev/shm/{name}.web"

    @staticmethod
    def size_for(nslots: int) -> int:
        return HEADER_BYTES + NREGIONS * REGION_BYTES + max(nslots, 1) * SLOT_BYTES

    @classmethod
    def create(cls, name: str, nslots: int) -> "WebSegment":
        """Create (or re-create) the segment; refuse if a live `ykshm web` owns it."""

        def prepare(path: str, fd: int, size: int) -> int:
            if size >= HEADER_BYTES:
                magic, _v, _n, _r, owner = _HEADER.unpack(os.pread(fd, _HEADER.size, 0))
                if magic == MAGIC and owner not in (0, os.getpid()) and _process_exists(owner):
                    raise SegmentError(f"{path} belongs to a running ykshm web (pid {owner}); stop it first")
            _initialise(fd, nslots, os.getpid())
            return nslots

        return cls._open(name, prepare)

    @classmethod
    def open_or_create(cls, name: str, nslots: int) -> "WebSegment":
        """Attach to the segment a supervisor made; make one if there is none (in-process serving)."""

        def prepare(path: str, fd: int, size: int) -> int:
            if size >= HEADER_BYTES:
                magic, version, n, nreg, _owner = _HEADER.unpack(os.pread(fd, _HEADER.size, 0))
                if magic == MAGIC and version == VERSION and nreg == NREGIONS and size == cls.size_for(n):
                    return n
            _initialise(fd, nslots, 0)
            return nslots

        return cls._open(name, prepare)

    @classmethod
    def _open(cls, name: str, prepare: Callable[[str, int, int], int]) -> "WebSegment":
        """Open (or make) the file; under the lock `prepare(path, fd, size)` checks or initialises
        it and returns its slot count; then map it. The fd is closed if anything fails."""
        path = cls.path_for(name)
        fd = _open_own(path)
        try:
            with _Locked(fd):
                nslots = prepare(path, fd, os.fstat(fd).st_size)
            mm = mmap.mmap(fd, cls.size_for(nslots), mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, mm, nslots)

    def close(self) -> None:
        """Unmap and close the file (again: nothing happens)."""
        if self._fd < 0:
            return
        if self._region_view is not None:
            self._region_view.release()
            self._region_view = None
        self._mm.close()
        os.close(self._fd)
        self._fd = -1

    def __enter__(self) -> "WebSegment":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def unlink(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    # -- locking ------------------------------------------------------------------------------

    def _lock(self) -> "_Locked":
        return _Locked(self._fd)

    # -- regions (metrics) --------------------------------------------------------------------

    def _region_offset(self, index: int) -> int:
        return HEADER_BYTES + index * REGION_BYTES

    def claim_region(self) -> int:
        """Take a region for this process: a free one, else one whose worker died. Returns index."""
        me, start = os.getpid(), _my_start()
        with self._lock():
            chosen = None
            for index in range(NREGIONS):
                off = self._region_offset(index)
                pid, pstart = struct.unpack_from("<qq", self._mm, off)
                if pid == me and pstart == start:
                    chosen = index
                    break
                if chosen is None and (pid == 0 or not pid_alive(pid, pstart)):
                    chosen = index
            if chosen is None:
                raise SegmentError("no free metrics region (more than 64 web workers?)")
            struct.pack_into("<qq", self._mm, self._region_offset(chosen), me, start)
        self.region = chosen
        off = self._region_offset(chosen) + REGION_HEADER
        self._region_view = memoryview(self._mm)[off : off + REGION_CELLS * 8].cast("d")
        return chosen

    def add(self, cell: int, value: float = 1.0) -> None:
        """Add to one metric cell of this process's region (claim_region first)."""
        view = self._region_view
        if view is not None:
            view[cell] += value

    def sum_cells(self, count: int) -> list[float]:
        """The cells 0..count-1 summed over every region (live or dead workers)."""
        totals = [0.0] * count
        for index in range(NREGIONS):
            off = self._region_offset(index)
            pid = struct.unpack_from("<q", self._mm, off)[0]
            if pid == 0:
                continue
            values = struct.unpack_from(f"<{count}d", self._mm, off + REGION_HEADER)
            for i, v in enumerate(values):
                totals[i] += v
        return totals

    # -- stream slots ---------------------------------------------------------------------------

    def _slot_offset(self, index: int) -> int:
        return HEADER_BYTES + NREGIONS * REGION_BYTES + index * SLOT_BYTES

    def _iter_slots(self) -> Iterator[tuple[int, int, int, bytes]]:
        # One copy of the table and one C-level unpack loop: with 10,000 slots, a slot at a
        # time took ~5 ms per stream opened.
        first = self._slot_offset(0)
        table = self._mm[first:first + self.nslots * SLOT_BYTES]
        for index, (pid, start, _region, hlen, host) in enumerate(_SLOT.iter_unpack(table)):
            yield index, pid, start, host[:hlen]

    def _reap_locked(self) -> int:
        """Free slots whose owner process is gone (under the lock). Returns how many."""
        alive: dict[tuple[int, int], bool] = {}
        freed = 0
        for index, pid, start, _host in self._iter_slots():
            if pid == 0:
                continue
            key = (pid, start)
            if key not in alive:
                alive[key] = _owner_alive(pid, start)
            if not alive[key]:
                self._free_slot(index)
                freed += 1
        return freed

    def _free_slot(self, index: int) -> None:
        _SLOT.pack_into(self._mm, self._slot_offset(index), 0, 0, 0, 0, b"")

    def _count_locked(self, hb: bytes) -> tuple[int | None, int, int]:
        """(first free slot, slots taken, slots taken by host `hb`).

        In C loops, not a Python loop over slots (1.4 ms per stream opened with 10,000 slots, which
        held a worker's streams up while many clients connected): pids are every 8th int64 of the
        table; a taken slot of `hb` is the only place where its length + name + NUL appear
        (a freed slot is all zeros)."""
        first = self._slot_offset(0)
        table = self._mm[first:first + self.nslots * SLOT_BYTES]
        pids = memoryview(table).cast("q")[::SLOT_BYTES // 8].tolist()
        free_count = pids.count(0)
        free = pids.index(0) if free_count else None
        if not hb:  # an empty name's pattern is all zeros, as a free slot is
            per_host = sum(1 for _i, pid, _s, host in self._iter_slots() if pid and not host)
        else:
            # Length, name, NUL occur only at a slot's host field: a name holds no NUL, and pid,
            # start time and region are small integers whose high bytes are zero.
            end = b"\0" if len(hb) < SLOT_HOST_MAX else b""
            per_host = table.count(struct.pack("<H", len(hb)) + hb + end)
        return free, self.nslots - free_count, per_host

    def acquire_stream(self, host: str, max_total: int, max_per_host: int) -> int | None:
        """Take a stream slot for `host` if both limits allow; the slot index, or None."""
        hb = host.encode("utf-8", "replace")[:SLOT_HOST_MAX]
        with self._lock():
            free, total, per_host = self._count_locked(hb)
            if free is None or total >= max_total or per_host >= max_per_host:
                # Slots of dead workers are reaped only when they would make us refuse.
                if not self._reap_locked():
                    return None
                free, total, per_host = self._count_locked(hb)
                if free is None or total >= max_total or per_host >= max_per_host:
                    return None
            _SLOT.pack_into(self._mm, self._slot_offset(free), os.getpid(), _my_start(), self.region or 0,
                            len(hb), hb)
            return free

    def release_stream(self, index: int) -> None:
        """Give back a slot this process holds (a slot someone else holds is left alone)."""
        with self._lock():
            pid = struct.unpack_from("<q", self._mm, self._slot_offset(index))[0]
            if pid == os.getpid():
                self._free_slot(index)

    def release_pid(self, pid: int) -> int:
        """Free every slot a (dead) process held; the supervisor calls this when it reaps a worker."""
        freed = 0
        with self._lock():
            for index, spid, _start, _host in self._iter_slots():
                if spid == pid:
                    self._free_slot(index)
                    freed += 1
        return freed

    def open_streams(self) -> tuple[int, dict[str, int]]:
        """(total, per host) open streams right now, across all workers (dead owners excluded)."""
        total = 0
        hosts: dict[str, int] = {}
        alive: dict[tuple[int, int], bool] = {}  # one liveness look per owner, not per slot
        for _index, pid, start, host in self._iter_slots():
            if pid == 0:
                continue
            if (pid, start) not in alive:
                alive[pid, start] = _owner_alive(pid, start)
            if not alive[pid, start]:
                continue
            total += 1
            key = host.decode("utf-8", "replace")
            hosts[key] = hosts.get(key, 0) + 1
        return total, hosts

    def stream_owners(self) -> dict[int, int]:
        """pid -> stream slots it holds now (a dead owner's slots count until they are freed)."""
        owners: dict[int, int] = {}
        for _index, pid, _start, _host in self._iter_slots():
            if pid:
                owners[pid] = owners.get(pid, 0) + 1
        return owners


def _open_own(path: str) -> int:
    """The segment file, made with O_EXCL (mode 0600) or, if it exists, opened without following
    a symlink and only if it is this user's own and nobody else may write it: /dev/shm is
    writable by every local user, and a file planted there would keep its owner's write access to
    the stream slots (or, as a symlink, make us truncate another file). A stale segment of our
    own is reused as before."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        try:
            return os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            continue  # removed meanwhile: make it
        except OSError as exc:
            why = "it is a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
            raise SegmentError(f"cannot open {path}: {why}; remove it if it is not ykshm's") from None
        problem = trust_problem(os.fstat(fd), frozenset({os.geteuid()}), writable_by_us=True)
        if problem is None:
            return fd
        os.close(fd)
        raise SegmentError(f"refusing {path}: {problem}; remove it (as its owner or root) "
                           f"or use another --name")
    raise SegmentError(f"{path} keeps being removed and re-created by another process")


class _Locked:
    def __init__(self, fd: int) -> None:
        self._fd = fd

    def __enter__(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)


def _initialise(fd: int, nslots: int, owner: int) -> None:
    """Size the file for `nslots` with every region and slot zeroed, and write the header."""
    os.ftruncate(fd, 0)
    os.ftruncate(fd, WebSegment.size_for(nslots))
    os.pwrite(fd, _HEADER.pack(MAGIC, VERSION, nslots, NREGIONS, owner), 0)


def _process_exists(pid: int) -> bool:
    """The pid is a running process; a zombie (or a process that just exited) is not."""
    state, start = _proc_state(pid)
    return start != 0 and state not in _GONE


_MY_START: dict[int, int] = {}


def _my_start() -> int:
    pid = os.getpid()
    if pid not in _MY_START:
        _MY_START[pid] = pid_start_time(pid)
    return _MY_START[pid]


def _owner_alive(pid: int, start: int) -> bool:
    # Liveness is cheap enough to ask every time (one psutil look per distinct owner per acquire).
    if pid == os.getpid():
        return start == _my_start()
    return pid_alive(pid, start)
