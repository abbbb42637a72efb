"""Endpoints over an existing torch.distributed process group (Comm.from_torch).

A gloo group moves CPU tensors through a transport written here, in Python, against
the public transport interface (reshard_transport.h, through ctypes callbacks): the
library plans, packs, unpacks and verifies as on every transport; this module only
posts the group's point-to-point sends and receives and runs the outcome agreement.
An NCCL group moves CUDA tensors over the library's own NCCL transport, on a
communicator of the same ranks bootstrapped through the group (torch does not hand
out its ncclComm_t), on torch's current CUDA stream.

Bounded waits: every torch call made here is asynchronous work; the caller waits for
it with the plan's deadline while a helper thread sits in Work.wait() (bounded by the
group's own timeout, the one given to init_process_group). A dead peer's connection
fails its operations at once.
"""

import ctypes
import struct
import threading
import time
import weakref
import zlib
from typing import Dict, List, Optional, Tuple

from . import _lib
from .comm import Comm, _cuda_device_stream, _need_nccl, nccl_unique_id
from .errors import Status, error

# Tags of reshard's messages on the group: the data of slot 0 and 1, the agreement.
# Each endpoint has a tag space of its own, TAG_SPACE tags from TAG_BASE + space *
# TAG_SPACE, so that any number of comms (and their plans) share one group: unnamed
# comms take spaces 0 .. UNNAMED_SPACES-1 in the order a process creates them on the
# group, named ones a space picked by a CRC-32 of the name. The tags below are those of
# space 0. Other point-to-point traffic of the caller on the same group must use tags
# outside [TAG_BASE, TAG_BASE + SPACES * TAG_SPACE).
TAG_BASE = 0x52530000
TAG_SLOT0 = TAG_BASE
TAG_AGREE = TAG_BASE + 8
TAG_CONFIRM = TAG_BASE + 10  # the confirmation round of agreement e: TAG_CONFIRM + (e & 1)
TAG_SPACE = 16
SPACES = 4096
UNNAMED_SPACES = 1024

_spaces_lock = threading.Lock()
_spaces: Dict[int, dict] = {}  # id(group) -> {"next": int, "live": {space: (name, weakref)}}


def _tag_space(group, name: Optional[str]) -> int:
    """The tag space of a new endpoint on ``group`` (see TAG_SPACE); ReshardError
    (INVALID_ARG) for an unnamed endpoint made off the main thread (threads create in
    different orders on different ranks, so the creation index would pair one thread's
    comm with another's), or a space a live endpoint of this group holds."""
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError("reshard: name= must be a non-empty str, the same on every rank; "
                        "got %r" % (name,))
    with _spaces_lock:
        g = _spaces.setdefault(id(group), {"next": 0, "live": {}})
        g["live"] = {k: v for k, v in g["live"].items() if v[1]() is not None}
        if name is None:
            if threading.current_thread() is not threading.main_thread():
                raise error(Status.INVALID_ARG, "Comm.from_torch: an unnamed comm made on a "
                            "thread other than the main thread: threads create comms in "
                            "different orders on different ranks, so pass name=, the same on "
                            "every rank and distinct per comm of the group (e.g. the engine "
                            "or model it serves)")
            unnamed = [k for k, v in g["live"].items() if v[0] is None]
            if unnamed:
                raise error(Status.INVALID_ARG, "Comm.from_torch: a second unnamed comm on "
                            "this group while the unnamed one in tag space %d is live: unnamed "
                            "comms pair by the order each rank makes them, and a rank that "
                            "makes them in another order pairs one plan's messages with "
                            "another's without any error (equal layouts look alike), so pass "
                            "name=, the same on every rank and distinct per comm of the group "
                            "(e.g. the engine or model it serves), or close the first"
                            % unnamed[0])
            space = g["next"] % UNNAMED_SPACES
        else:
            space = UNNAMED_SPACES + zlib.crc32(name.encode()) % (SPACES - UNNAMED_SPACES)
        if space in g["live"]:
            held = g["live"][space][0]
            raise error(Status.INVALID_ARG, "Comm.from_torch: %s takes tag space %d of this "
                        "group, which the live comm %s holds; %s"
                        % ("name %r" % name if name else "an unnamed comm", space,
                           "named %r" % held if held else "made unnamed",
                           "close it first, or choose another name" if name else
                           "close it first, or name this one"))
        if name is None:
            g["next"] += 1
        return space


def _hold_space(group, space: int, name: Optional[str], transport) -> None:
    with _spaces_lock:
        _spaces[id(group)]["live"][space] = (name, weakref.ref(transport))

_MSG_BYTES = 480  # the start of a rank's error message travels with its status
_HEAD = 4 + _lib.AGREE_WORDS  # int64: status, own, suspect, in_flight, words
_FORMAT = "<%dq%ds" % (_HEAD, _MSG_BYTES)
_CONTRIB_BYTES = struct.calcsize(_FORMAT)

_TIMEOUT, _LOST = "timeout", "lost"
GRACE_S = 0.5  # how long the agreement still waits for ranks some rank failed on
_CONFIRMED, _GAVE_UP = 1, 2  # the confirmation round's one byte


def _torch():
    import torch
    import torch.distributed as dist
    return torch, dist


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


class _Waiter:
    """Waits for one torch Work on a thread of its own (Work.wait() without a timeout,
    so bounded by the group's own timeout), so that the caller waits with its own
    deadline: gloo's Work.wait(timeout) closes every connection of the rank when it
    times out, after which this rank could tell no peer why it failed."""

    __slots__ = ("done", "error")

    def __init__(self, work):
        self.done = threading.Event()
        self.error: Optional[str] = None
        threading.Thread(target=self._run, args=(work,), daemon=True).start()

    def _run(self, work):
        try:
            work.wait()
        except BaseException as e:  # noqa: BLE001 - reported by wait()
            self.error = _first_line(e)
        finally:
            self.done.set()

    def wait(self, seconds: float) -> Optional[Tuple[str, str]]:
        """None once the work completed within ``seconds``, else (kind, text): kind
        "timeout" (still running) or "lost" (it failed: a closed connection)."""
        if not self.done.wait(max(seconds, 0.0)):
            return _TIMEOUT, "not complete"
        if self.error is None:
            return None
        return (_TIMEOUT if "Timed out" in self.error else _LOST), self.error


class _Contribution:
    __slots__ = ("status", "own", "suspect", "in_flight", "words", "msg")

    def __init__(self, status, own, suspect, in_flight, words, msg):
        self.status, self.own, self.suspect = status, own, suspect
        self.in_flight, self.words, self.msg = in_flight, words, msg


class GlooTransport:
    """The transport operations over a gloo process group: one per endpoint; the
    library calls them through the ctypes table this builds (ops)."""

    def __init__(self, group, space: int = 0):
        torch, _ = _torch()
        self._torch = torch
        self.group = group
        self.tag0 = TAG_BASE + space * TAG_SPACE - TAG_SLOT0  # added to the tags above
        self.rank, self.size = group.rank(), group.size()
        self.slots: List[list] = [[], []]  # (work, peer, tensor) per slot
        self.staging: Dict[int, object] = {}
        self.kept: list = []  # memory gloo may still touch after a failure: never freed
        self.suspect: Optional[int] = None  # the peer this execution failed on
        self.lost = set()
        self.broken = False
        self.epoch = 0  # agreements taken part in (the same count on every rank)
        self.ops = self._table()

    # ---- memory ------------------------------------------------------------------------

    def _view(self, addr: int, nbytes: int):
        """A uint8 CPU tensor over ``nbytes`` at ``addr`` (no copy)."""
        raw = (ctypes.c_uint8 * nbytes).from_address(addr)
        return self._torch.frombuffer(raw, dtype=self._torch.uint8)

    def alloc_staging(self, nbytes: int, out) -> int:
        t = self._torch.empty(max(int(nbytes), 1), dtype=self._torch.uint8)
        self.staging[t.data_ptr()] = t
        out[0] = t.data_ptr()
        return 0

    def free_staging(self, addr: int) -> None:
        t = self.staging.pop(addr, None)
        if t is not None and (self.broken or self.slots[0] or self.slots[1]):
            self.kept.append(t)  # a failed round may still write it

    # ---- rounds ------------------------------------------------------------------------

    def round_begin(self, slot: int) -> int:
        if slot not in (0, 1):
            return self._err(Status.INVALID_ARG, "rank %d: slot %d is not 0 or 1"
                             % (self.rank, slot))
        if self.slots[slot]:
            return self._err(Status.INVALID_ARG, "rank %d: round_begin on slot %d with %d "
                             "transfers outstanding" % (self.rank, slot, len(self.slots[slot])))
        return 0

    def post(self, send: bool, slot: int, peer: int, addr: int, nbytes: int) -> int:
        if self.broken:
            return self._err(Status.TRANSPORT, "rank %d: this torch comm failed in an earlier "
                             "execution; make a new one" % self.rank)
        t = self._view(addr, nbytes)
        try:
            if send:
                work = _Waiter(self.group.send([t], peer, self.tag0 + TAG_SLOT0 + slot))
            else:
                work = _Waiter(self.group.recv([t], peer, self.tag0 + TAG_SLOT0 + slot))
        except RuntimeError as e:
            self.suspect, self.broken = peer, True
            self.lost.add(peer)
            return self._err(Status.TRANSPORT, "rank %d: %s to rank %d failed: %s (dead peer?)"
                             % (self.rank, "send" if send else "receive", peer, e))
        self.slots[slot].append((work, peer, t))
        return 0

    def round_wait(self, slot: int, timeout_s: float) -> int:
        pending = self.slots[slot]
        deadline = time.monotonic() + timeout_s
        while pending:
            work, peer, _ = pending[0]
            failed = work.wait(deadline - time.monotonic())
            if failed is not None:
                self.broken = True
                self.kept.extend(pending)
                self.slots[slot] = []
                peers = sorted({p for _, p, _ in pending})
                self.lost.update(peers)
                self.suspect = peer
                kind, text = failed
                if kind == _TIMEOUT:
                    return self._err(Status.TIMEOUT, "rank %d: no transfer with rank %d "
                                     "completed for %.1f s (round wait, slot %d; %d outstanding "
                                     "with rank(s) %s; dead or stalled peer?)"
                                     % (self.rank, peer, timeout_s, slot, len(pending),
                                        ", ".join(map(str, peers))))
                return self._err(Status.TRANSPORT, "rank %d: the connection to rank %d failed "
                                 "(round wait, slot %d): %s" % (self.rank, peer, slot, text))
            pending.pop(0)
            deadline = time.monotonic() + timeout_s  # progress: the clock starts again
        return 0

    # ---- the outcome agreement ---------------------------------------------------------

    def finish(self, local: int, words, min_words, timeout_s: float) -> int:
        """Every rank sends its contribution (status, whether the failure is its own,
        the peer it failed on, whether transfers were left in flight, the words, the
        start of its message) to every other rank and takes theirs: first from the ranks
        expected to arrive, then from those some rank failed on.
        A peer may still be inside a round wait of up to timeout_s when this one
        arrives, so a missing contribution is waited for up to twice timeout_s, and
        only GRACE_S once every rank still missing is one some rank failed on."""
        torch = self._torch
        local_msg = _lib.last_error()
        in_flight = bool(self.slots[0] or self.slots[1])
        if in_flight:
            self.broken = True
            self.kept.extend(self.slots[0] + self.slots[1])
            self.slots = [[], []]
        head = [int(local), int(local != 0 and self.suspect is None),  # own failure
                -1 if self.suspect is None else self.suspect, int(in_flight)]
        head += [int(words[i]) if words else _lib.INT64_MAX for i in range(_lib.AGREE_WORDS)]
        text = local_msg.encode("utf-8", "replace")[:_MSG_BYTES - 1] if local else b""
        mine = torch.frombuffer(bytearray(struct.pack(_FORMAT, *head, text)), dtype=torch.uint8)
        tag = self.tag0 + TAG_AGREE + (self.epoch & 1)  # a peer is at most one agreement ahead
        self.epoch += 1
        peers = [p for p in range(self.size) if p != self.rank]
        got = {self.rank: self._parse(mine)}
        suspects, missing = set(self.lost), set()
        sends, recvs = {}, {}
        for p in peers:
            w = self._send(mine, p, tag)
            if w is None:  # gloo closed the connection (a timeout, a dead peer)
                suspects.add(p)
            else:
                sends[p] = w
        bufs = {p: torch.empty(_CONTRIB_BYTES, dtype=torch.uint8) for p in peers}
        for p in peers:
            w = self._recv(bufs[p], p, tag)
            if w is None:
                suspects.add(p)
            else:
                recvs[p] = w
        pending = set(peers)
        deadline = time.monotonic() + 2 * timeout_s
        cut = False
        nap = 0.0005
        while pending:
            # every contribution as it arrives (whichever rank first), so that the ranks
            # some rank failed on (which may never come) are known as soon as anyone says
            # so; once only those are missing, they get GRACE_S more
            arrived = False
            for p in sorted(pending):
                if p not in recvs:
                    pending.discard(p)
                    missing.add(p)
                    continue
                w = recvs[p].wait(0)
                if w is not None and w[0] == _TIMEOUT:
                    continue  # not yet
                pending.discard(p)
                arrived = True
                if w is not None:  # its connection failed
                    missing.add(p)
                    continue
                got[p] = c = self._parse(bufs[p])
                if c.status != 0 and c.suspect >= 0:
                    suspects.add(c.suspect)
            if pending and pending <= suspects and not cut:
                deadline, cut = min(deadline, time.monotonic() + GRACE_S), True
            if pending and time.monotonic() > deadline:
                missing |= pending  # given up on, past the deadline
                pending = set()
            if pending and not arrived:
                time.sleep(nap)
                nap = min(nap * 2, 0.01)
            elif arrived:
                nap = 0.0005
        pending |= missing
        for p, w in sends.items():
            if p not in pending and w.wait(max(deadline - time.monotonic(), GRACE_S)):
                pending.add(p)  # it has our contribution or never will: state unknown
        self.suspect = None
        confirm_tag = self.tag0 + TAG_CONFIRM + ((self.epoch - 1) & 1)
        if pending:
            self.broken = True
            self.kept.extend([mine] + list(bufs.values()))
            self.lost.update(pending)
            self._confirm_round(confirm_tag, peers, _GAVE_UP)  # the others fail too
            return self._missing(sorted(pending), got, local, local_msg, timeout_s)
        if any(c.in_flight for c in got.values()):
            self.broken = True
        if min_words:
            for i in range(_lib.AGREE_WORDS):
                min_words[i] = min(c.words[i] for c in got.values())
        outcome = self._outcome(got, local, local_msg)
        return self._confirm(confirm_tag, peers, outcome, timeout_s)

    def _send(self, tensor, peer: int, tag: int) -> Optional[_Waiter]:
        """Post one message of an agreement; None when gloo refused it (a closed
        connection). One method for every such send: tests stop a rank here."""
        try:
            return _Waiter(self.group.send([tensor], peer, tag))
        except RuntimeError:
            return None

    def _recv(self, tensor, peer: int, tag: int) -> Optional[_Waiter]:
        """Post the receive of one message of an agreement (as _send)."""
        try:
            return _Waiter(self.group.recv([tensor], peer, tag))
        except RuntimeError:
            return None

    def _confirm_round(self, tag: int, peers, what: int) -> Dict[int, Optional[_Waiter]]:
        """Send this rank's one byte of the confirmation round to every peer."""
        msg = self._torch.tensor([what], dtype=self._torch.uint8)
        self.kept.append(msg)  # a peer that stopped never takes it
        return {p: self._send(msg, p, tag) for p in peers}

    def _confirm(self, tag: int, peers, outcome: int, timeout_s: float) -> int:
        """The confirmation round of an agreement this rank decided (every contribution
        arrived, every send of its own completed): the decision stands unless some rank
        gave up on the decision round. Such a rank entered the agreement before this one
        had every contribution, and gives up by its deadline (twice the timeout from its
        start), so its notice arrives by twice the timeout from now plus the grace. Every
        peer's confirmation arriving ends the round at once; a missing one (a peer stopped
        after deciding) with no notice leaves the decision standing and the comm broken.
        Without this round a rank whose receive for one peer was posted and for another
        not yet (it stopped in between) lets the first decide OK and the second fail."""
        torch = self._torch
        sends = self._confirm_round(tag, peers, _CONFIRMED)
        bufs = {p: torch.zeros(1, dtype=torch.uint8) for p in peers}
        recvs = {p: self._recv(bufs[p], p, tag) for p in peers}
        deadline = time.monotonic() + 2 * timeout_s + GRACE_S
        pending = {p for p in peers if recvs[p] is not None}
        missing = set(peers) - pending
        while pending and time.monotonic() < deadline:
            for p in sorted(pending):
                if recvs[p].wait(0.002) is not None:
                    continue
                pending.discard(p)
                if int(bufs[p][0]) == _GAVE_UP:
                    self.broken = True
                    self.kept.extend(bufs.values())
                    self.lost.update(pending | missing)
                    return self._err(Status.TIMEOUT, "rank %d: rank %d gave up waiting for the "
                                     "agreement (a peer stalled or died): every rank fails "
                                     "this execution" % (self.rank, p))
        missing |= pending
        if missing or any(w is None or w.wait(GRACE_S) is not None for w in sends.values()):
            self.broken = True  # a peer stopped after deciding: the decision stands
            self.kept.extend(bufs.values())
            self.lost.update(missing)
        return outcome

    @staticmethod
    def _parse(buf) -> _Contribution:
        *head, raw = struct.unpack(_FORMAT, buf.numpy().tobytes())
        return _Contribution(head[0], head[1], head[2], head[3], head[4:],
                             raw.split(b"\0", 1)[0].decode("utf-8", "replace"))

    def _missing(self, missing, got, local, local_msg, timeout_s) -> int:
        """The error when ranks ``missing`` did not reach the agreement: it names them,
        with the evidence of a rank that failed on one of them."""
        # a rank whose contribution arrived reached the end; it is missing only because
        # it left before taking this rank's (it failed too, and is not to blame)
        left = [p for p in missing if p in got]
        absent = [p for p in missing if p not in got]
        # whom the peers that arrived failed on; else whom this rank failed on, unless that
        # was a lost connection while other ranks are absent too (a peer that failed and
        # left closes its connections: which absent rank failed first is not known here)
        blamed = sorted({c.suspect for r, c in got.items()
                         if r != self.rank and c.status != 0 and c.suspect >= 0} & set(absent))
        own = got[self.rank].suspect
        if not blamed and own in absent and (int(local) != int(Status.TRANSPORT)
                                             or len(absent) == 1):
            blamed = [own]
        blamed = blamed or absent
        names = ", ".join(str(p) for p in blamed)
        rest = [p for p in absent if p not in blamed]
        tail = ""
        if rest:
            tail += "; rank(s) %s did not reach it either" % ", ".join(str(p) for p in rest)
        if left and absent:
            tail += "; rank(s) %s gave their outcome but did not take this rank's (left " \
                "after failing, or stalled)" % ", ".join(str(p) for p in left)
        if not absent:  # all gave their outcome; some did not take this rank's
            names = ", ".join(str(p) for p in left)
            return self._err(Status.TIMEOUT, "rank %d: rank(s) %s stalled or died in the "
                             "outcome agreement: they gave their outcome but did not take "
                             "this rank's within the bound" % (self.rank, names))
        witness = [r for r, c in sorted(got.items()) if c.status != 0 and c.suspect in blamed]
        if witness:
            c = got[witness[0]]
            return self._err(c.status, "rank %d: rank(s) %s stalled or died: they did not "
                             "reach the end of the execution (%s)%s"
                             % (self.rank, names, c.msg or _status_name(c.status), tail))
        also = "; this rank: " + local_msg if local and local_msg else ""
        return self._err(Status.TIMEOUT, "rank %d: rank(s) %s did not reach the end of the "
                         "execution (stalled or dead; this rank waits for them at most 2 x "
                         "timeout_s = %.1f s, less when a round wait fired first)%s%s"
                         % (self.rank, names, 2 * timeout_s, tail, also))

    def _outcome(self, got: Dict[int, _Contribution], local: int, local_msg: str) -> int:
        """Every rank arrived: the error of the rank at the root of the failures, the
        same on every rank."""
        failed = {r: c for r, c in got.items() if c.status != 0}
        if not failed:
            return 0
        own = sorted(r for r, c in failed.items() if c.own)
        if own:
            culprit = own[0]
        else:  # every failure waited on a peer: follow the suspects to one that did not
            culprit, seen = min(failed), set()
            while culprit in failed and failed[culprit].suspect >= 0 and culprit not in seen:
                seen.add(culprit)
                culprit = failed[culprit].suspect
        if culprit == self.rank and local != 0:
            return self._err(local, local_msg or "rank %d failed" % self.rank)
        if culprit in failed:
            c = failed[culprit]
            return self._err(c.status, "rank %d: rank %d failed with %s: %s"
                             % (self.rank, culprit, _status_name(c.status), c.msg))
        reporter = min(r for r, c in failed.items() if c.suspect == culprit)
        c = failed[reporter]
        return self._err(c.status, "rank %d: rank %d was too slow (%s)"
                         % (self.rank, culprit, c.msg))

    # ---- the ctypes table --------------------------------------------------------------

    def _err(self, status, message) -> int:
        return _lib.lib.reshard_transport_error(int(status), message.encode("utf-8", "replace"))

    def _guard(self, fn, what):
        def call(*args):
            try:
                return fn(*args)
            except BaseException as e:  # noqa: BLE001 - an exception must not cross C
                self.broken = True
                return self._err(Status.TRANSPORT, "rank %d: %s raised %s: %s"
                                 % (self.rank, what, type(e).__name__, e))
        return call

    def _table(self):
        T = _lib.TransportOps
        g = self._guard
        self._callbacks = [
            T.ALLOC(g(lambda c, n, out: self.alloc_staging(n, out), "alloc_staging")),
            T.FREE(lambda c, p: self.free_staging(p)),
            T.SLOT(g(lambda c, s: self.round_begin(s), "round_begin")),
            T.POST(g(lambda c, s, peer, buf, n: self.post(True, s, peer, buf, n), "post_send")),
            T.POST(g(lambda c, s, peer, buf, n: self.post(False, s, peer, buf, n),
                     "post_recv")),
            T.SLOT(lambda c, s: 0),
            T.WAIT(g(lambda c, s, t: self.round_wait(s, t), "round_wait")),
            T.FINISH(g(lambda c, st, w, mw, t: self.finish(st, w, mw, t), "finish")),
        ]
        alloc, free, begin, send, recv, end, wait, fin = self._callbacks
        return T(version=_lib.TRANSPORT_VERSION, name=b"torch-gloo", device_memory=False,
                 alloc_staging=alloc, free_staging=free, round_begin=begin, post_send=send,
                 post_recv=recv, round_end=end, round_wait=wait, finish=fin)


def _status_name(status: int) -> str:
    return _lib.lib.reshard_status_string(int(status)).decode()


def from_torch(group=None, name: Optional[str] = None):
    """An endpoint over the torch.distributed process group ``group`` (default the
    world group): rank and size are the group's. Local (no collective) for a gloo
    group: every rank of the group makes its own, and all of them execute every plan.

    Any number of endpoints (one per engine, per model, per thread) share a group: each
    has a tag space of its own, so one's messages never match another's. ``name`` (a
    str, the same on every rank, distinct per endpoint of the group) picks it. One
    endpoint per group may be unnamed at a time: its space is the order in which this
    process made its unnamed endpoints, the same on every rank only in program order,
    and nothing in the messages could tell two swapped endpoints apart (their plans may
    have equal layouts); so a second live unnamed endpoint on the group is refused
    (INVALID_ARG), and so are an unnamed one made off the main thread and a name (or
    space) a live endpoint of the group holds. Endpoints whose names are absent on a
    peer never exchange a message: their executions time out on every rank. Plans of
    equal inputs pair by identity, checked at every execution (Plan(name=...), else
    their number, fixed at creation, unique among the unnamed plans one thread holds; a rank
    executing another one than its peers fails on every rank, MISMATCH). Unnamed plans
    of equal inputs made on two threads that share one endpoint are not told apart: name
    them. Not checked: two endpoint names swapped between
    ranks when each endpoint's plan comes from its own thread and the plans have equal
    inputs: they refit the wrong values without an error. Give each endpoint (and its
    plan) the same name, for the same model, on every rank. One endpoint serves one
    call at a time: when two threads call it at once, the
    call in flight fails on every rank, and so does every later execution on it (a rank
    may have kept another thread's plan than its peers): give each thread its own.

    gloo: CPU tensors (torch CPU tensors, numpy arrays), moved by the group's
    point-to-point operations under reshard's tags (TAG_BASE ..), waited for with the
    plan's timeout. A peer that stalls or dies fails the execution on every rank
    within about twice the timeout (the round wait, then the agreement), naming that
    rank; the comm is then broken: make a new one (the group itself remains usable
    for other work only with peers that are still alive).

    nccl: CUDA tensors, on a reshard NCCL communicator of the group's ranks, created
    collectively here: group rank 0 makes the unique id and broadcasts it over the
    group; the endpoint runs on torch's current CUDA stream of the current device.
    Needs a library built with NCCL.

    Raises ReshardError (INVALID_ARG: torch.distributed not initialized; UNSUPPORTED:
    another backend)."""
    _, dist = _torch()
    if not dist.is_available() or not dist.is_initialized():
        raise error(Status.INVALID_ARG, "Comm.from_torch: torch.distributed is not "
                    "initialized (call torch.distributed.init_process_group first)")
    if group is None:
        group = dist.group.WORLD
    backend = str(dist.get_backend(group)).lower()
    if backend == "gloo":
        return from_group(group, name)
    if backend == "nccl":
        return _from_torch_nccl(group, dist)
    raise error(Status.UNSUPPORTED, "Comm.from_torch: backend %r: gloo (CPU tensors) and nccl "
                "(CUDA tensors) are supported" % backend)


def from_group(group, name: Optional[str] = None):
    """An endpoint over a gloo process group object itself (``group.rank()``,
    ``group.size()``, ``group.send``/``group.recv``), one that torch.distributed may
    not know: e.g. ``torch.distributed.ProcessGroupGloo(store, rank, size, timeout)``
    made beside the frameworks' own default groups. Local, as Comm.from_torch's gloo
    endpoint, with the same stall and dead-peer rules and the same tag spaces
    (``name``)."""
    space = _tag_space(group, name)
    t = GlooTransport(group, space)
    _hold_space(group, space, name, t)
    h = _lib.c_vp()
    _lib.check(_lib.lib.reshard_comm_create_transport(ctypes.byref(t.ops), None, t.rank,
                                                      t.size, ctypes.byref(h)))
    return Comm(h.value, "torch-gloo", "cpu", keep=t)


def _from_torch_nccl(group, dist):
    _need_nccl()
    rank, size = group.rank(), group.size()
    holder = [nccl_unique_id() if rank == 0 else None]
    root = 0 if group is dist.group.WORLD else dist.distributed_c10d._get_global_rank(group, 0)
    dist.broadcast_object_list(holder, src=root, group=group)
    uid = bytes(holder[0])
    device, raw_stream = _cuda_device_stream(None, None)
    h = _lib.c_vp()
    _lib.check(_lib.lib.reshard_comm_create_nccl_from_id(uid, int(rank), int(size), device,
                                                          raw_stream, ctypes.byref(h)))
    return Comm(h.value, "nccl", "cuda")
