"""Kernel receive stamps: when each read's bytes reached the socket, not when the loop read them.

Place in the map (docs/architecture.md, "Clients"): under ``clients.h1``, whose connections
read with ``recvmsg`` and ask the kernel for ``SO_TIMESTAMPNS`` (a software receive stamp,
``CLOCK_REALTIME``, taken as the segment is queued on the socket). A read's stamp is the one
of the last segment it copied; ``ClockBridge`` moves it onto ``perf_counter_ns`` (the clock of
every latency in a record), and the read's user-space time minus its stamp is the client's own
lag for that read (``RequestRecord.chunk_lag_ns``).

What one stamp bounds: TCP merges segments that arrive while nobody reads into the segment
queued before them, and the merged segment keeps the *last* one's stamp (seen on this project's
machine: five events 10 ms apart read 80 ms late all carried the fifth's stamp). So a late read
of several events dates all of them at the last, and reading in small pieces cannot undo it.
The first token is what TTFT is made of, so ``ArrivalWatcher`` makes its stamp its own: a
thread outside the event loop, blocked in ``epoll`` on the sockets of responses that have not
shown their first token yet, notes at every arrival the socket's count of bytes received
(``TCP_INFO``) and the stamp of the newest segment (a ``MSG_PEEK``). The connection then cuts
its next reads at those byte counts and feeds each piece with its own arrival's stamp. The
watcher needs the GIL only for a few microseconds per arrival; a loop blocked in Python code
holds it for up to the interpreter's switch interval (5 ms), and the peeked stamp is still the
arrival's own unless another segment merged into it meanwhile.

Where the kernel gives no stamp (a kernel without ``SO_TIMESTAMPNS``, a read with no control
message), the read is timed in user space and the record says so (``RequestRecord.clock``).
Linux switches its stamping on a moment after the first socket asks for it, and off when the
last one closes; ``StampKeeper`` holds it on for the process from its first stamped socket.
"""

from __future__ import annotations

import logging
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: ``SO_TIMESTAMPNS`` (Python's socket module names it only on some builds; 35 is Linux's
#: number; elsewhere there is none and reads are timed in user space)
SO_TIMESTAMPNS: int | None = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)
#: room for one ``struct timespec`` control message
ANCILLARY_BYTES = socket.CMSG_SPACE(16)
_TIMESPEC = struct.Struct("qq")
#: a peek copies the whole queue, so that its stamp is the newest segment's (a peek of the
#: first bytes only would date them by the oldest segment not merged into the rest)
PEEK_BYTES = 1 << 16
#: ``struct tcp_info``'s ``tcpi_bytes_received`` (Linux 4.1 and later): its offset, and how many
#: bytes of the struct to ask for
_BYTES_RECEIVED_AT = 128
_TCP_INFO_BYTES = 136

_perf_ns = time.perf_counter_ns
_real_ns = time.time_ns


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp every read of ``sock``; False where it cannot."""
    if SO_TIMESTAMPNS is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except (OSError, AttributeError):
        return False
    if not _KEEPER.tried:
        _KEEPER.hold()
    return True


class StampKeeper:
    """Keeps the kernel stamping from the first stamped socket to the end of the process.

    Linux stamps received packets only while some socket asks for stamps, and it switches that
    on (and off, when the last such socket closes) through deferred work: the segments that come
    in just after a machine's first ``SO_TIMESTAMPNS`` carry no stamp, and a TCP read of them
    comes with no control message. So, once per process, ``hold`` opens a loopback connection,
    asks for stamps on its reading end and keeps that end open (stamping never switches off
    between one run's connections and the next's), and sends a byte over it until one arrives
    stamped (``wait_s`` at most): the first response is then stamped too.
    """

    __slots__ = ("held", "sock", "tried")

    def __init__(self) -> None:
        self.tried = False
        self.held = False
        self.sock: socket.socket | None = None

    def hold(self, wait_s: float = 0.25) -> bool:
        """True once the kernel stamps a loopback segment (False: it did not within ``wait_s``)."""
        self.tried = True
        try:
            self.held = self._probe(wait_s)
        except OSError as exc:
            log.warning("cannot check that the kernel stamps reads: %s", exc)
            if self.sock is not None:
                self.sock.close()
                self.sock = None
            return False
        if not self.held:
            log.warning("the kernel did not stamp a loopback read within %.2f s", wait_s)
        return self.held

    def _probe(self, wait_s: float) -> bool:
        assert SO_TIMESTAMPNS is not None
        with socket.create_server(("127.0.0.1", 0)) as listener:
            reader = socket.create_connection(listener.getsockname()[:2])
            reader.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            reader.settimeout(wait_s)
            self.sock = reader  # kept open: its option holds the kernel's stamping on
            writer, _ = listener.accept()
        with writer:
            deadline = time.monotonic() + wait_s
            while True:
                writer.send(b"s")
                _, ancillary, _, _ = reader.recvmsg(1, ANCILLARY_BYTES)
                if stamp_of(ancillary) is not None:
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.001)


#: the process's keeper
_KEEPER = StampKeeper()


def stamp_of(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The receive stamp (``CLOCK_REALTIME`` ns) in ``recvmsg``'s control messages, if any."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
            seconds, nanos = _TIMESPEC.unpack_from(data)
            return seconds * 1_000_000_000 + nanos
    return None


class ClockBridge:
    """``CLOCK_REALTIME`` stamps onto ``perf_counter_ns`` (``CLOCK_MONOTONIC``): the offset
    between the two clocks, read as the tightest of a few paired readings (a reading split by
    a preemption would move every stamp by as much) and read again every ``refresh_ns``."""

    __slots__ = ("_next_ns", "offset_ns", "refresh_ns")

    def __init__(self, refresh_ns: int = 1_000_000_000) -> None:
        self.refresh_ns = refresh_ns
        self.offset_ns = 0
        self._next_ns = 0

    def to_perf_ns(self, stamp_real_ns: int, now_perf_ns: int) -> int:
        """``stamp_real_ns`` on ``perf_counter_ns`` (``now_perf_ns``: the caller's reading)."""
        if now_perf_ns >= self._next_ns:
            self._measure()
        return stamp_real_ns - self.offset_ns

    def _measure(self) -> None:
        best_gap = best_offset = None
        for _ in range(5):
            before = _perf_ns()
            real = _real_ns()
            after = _perf_ns()
            gap = after - before
            if best_gap is None or gap < best_gap:
                best_gap, best_offset = gap, real - (before + after) // 2
        assert best_offset is not None
        self.offset_ns = best_offset
        self._next_ns = _perf_ns() + self.refresh_ns


#: the process's bridge (the event loop's thread and the watcher's share it: a race only reads
#: the offset twice)
CLOCKS = ClockBridge()


def bytes_received(sock: socket.socket) -> int | None:
    """The kernel's count of bytes received on ``sock`` since it connected."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES)
    except (OSError, AttributeError):
        return None
    if len(info) < _TCP_INFO_BYTES:
        return None
    return int.from_bytes(info[_BYTES_RECEIVED_AT:_TCP_INFO_BYTES], "little")


#: what a watched connection is told of each arrival: (bytes received, stamp on perf_counter_ns)
ArrivalNote = Callable[[int, int], None]


class ArrivalWatcher:
    """One thread per process, noting the arrivals on the sockets it is given.

    ``watch(sock, note)`` until ``unwatch(sock)``: at every arrival on ``sock``, ``note`` is
    called (in the watcher's thread) with the socket's bytes received so far and the newest
    segment's receive stamp on ``perf_counter_ns``. Started on first use, a daemon thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._epoll: select.epoll | None = None
        self._notes: dict[int, tuple[socket.socket, ArrivalNote]] = {}
        self._thread: threading.Thread | None = None
        self.failed = False

    def watch(self, sock: socket.socket, note: ArrivalNote) -> bool:
        """Start noting ``sock``'s arrivals; False where the watcher cannot (it then says why
        once in the log)."""
        if self.failed:
            return False
        fd = sock.fileno()
        with self._lock:
            try:
                epoll = self._epoll or self._start()
                self._notes[fd] = (sock, note)
                try:
                    epoll.register(fd, select.EPOLLIN | select.EPOLLET)
                except FileExistsError:  # watched already (never unwatched): watch it anew
                    epoll.modify(fd, select.EPOLLIN | select.EPOLLET)
            except (OSError, AttributeError) as exc:  # AttributeError: no epoll on this system
                self._notes.pop(fd, None)
                self._give_up(exc)
                return False
        return True

    def unwatch(self, sock: socket.socket) -> None:
        fd = sock.fileno()
        with self._lock:
            if self._notes.pop(fd, None) is not None and self._epoll is not None and fd >= 0:
                try:
                    self._epoll.unregister(fd)
                except OSError:  # closed already: the kernel dropped it
                    pass

    def _start(self) -> select.epoll:
        self._epoll = select.epoll()
        self._thread = threading.Thread(target=self._run, name="swarm-arrivals", daemon=True)
        self._thread.start()
        return self._epoll

    def _give_up(self, exc: Exception) -> None:
        self.failed = True
        log.warning("arrival watcher off (first tokens keep the stamp of their read): %s", exc)

    def _run(self) -> None:
        epoll = self._epoll
        assert epoll is not None
        notes = self._notes
        while True:
            try:
                events = epoll.poll()
            except InterruptedError:
                continue
            except OSError as exc:
                self._give_up(exc)
                return
            for fd, _ in events:
                entry = notes.get(fd)
                if entry is not None:
                    self._note(*entry)

    @staticmethod
    def _note(sock: socket.socket, note: ArrivalNote) -> None:
        before = bytes_received(sock)
        try:
            _, ancillary, _, _ = sock.recvmsg(PEEK_BYTES, ANCILLARY_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:  # read already, or closed: the loop's own read has the stamp
            return
        now_perf = _perf_ns()
        after = bytes_received(sock)
        stamp = stamp_of(ancillary)
        if stamp is None or before is None or after != before:
            return  # no stamp, or a segment came in between: not an arrival we can date
        note(after, CLOCKS.to_perf_ns(stamp, now_perf))


_WATCHER: ArrivalWatcher | None = None


def arrival_watcher() -> ArrivalWatcher:
    """The process's one watcher."""
    global _WATCHER
    if _WATCHER is None:
        _WATCHER = ArrivalWatcher()
    return _WATCHER
