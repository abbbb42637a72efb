"""Plans (reshard_plan_t): computed once from two layouts, executed every step."""

import ctypes
import weakref

from . import _lib
from .buffers import BindingFailed, bind, problems_message, raise_problems
from .errors import ReshardError, Status, error
from .layout import Layout

ALL_RANKS = _lib.ALL_RANKS
DEFAULT_TIMEOUT_S = 60.0  # RESHARD_DEFAULT_TIMEOUT_S (reshard.h), the command line's too

_STAT_KEYS = [f for f, _ in _lib.PlanStats._fields_]


def _placement(p, world, hosts, devices, colocated):
    """Set the placement fields of PlanParams @p p; returns the arrays to keep alive."""
    if hosts is None:
        if devices is not None or colocated:
            raise ValueError("reshard: devices= and colocated= need hosts= (which ranks "
                             "share a host)")
        return None
    arrays = []
    for name, v in (("hosts", hosts), ("devices", devices)):
        if v is None:
            arrays.append(None)
            continue
        v = [_lib.as_int(x, name, lo=_lib.DEVICE_CPU if name == "devices" else 0) for x in v]
        if len(v) != world:
            raise ValueError("reshard: %s= has %d entries for %d ranks" % (name, len(v), world))
        arrays.append((_lib.c_i32 * world)(*v))
    p.field_mask |= _lib.PARAM_PLACEMENT
    p.host = arrays[0]
    if arrays[1] is not None:
        p.device = arrays[1]
    if colocated:
        p.field_mask |= _lib.PARAM_COLOCATED
        p.colocated = 1
    return arrays


def _memory_owner(obj):
    """The object whose life is the life of ``obj``'s memory, as far as Python can tell,
    weakly referenceable: the base of a view (torch ``_base``, numpy ``base``, followed to
    the root: views of one array share it), else ``obj`` itself; None when nothing on that
    chain takes a weak reference."""
    chain = [obj]
    while len(chain) < 64:
        nxt = getattr(chain[-1], "_base", None)  # torch: a view's base tensor
        if nxt is None:
            nxt = getattr(chain[-1], "base", None)  # numpy (and cupy): a view's base
        if nxt is None or isinstance(nxt, (bytes, str)) or any(nxt is c for c in chain):
            break
        chain.append(nxt)
    for o in reversed(chain):
        try:
            weakref.ref(o)
            return o
        except TypeError:
            continue
    return None


def _owners(buffers):
    """Each bound destination's memory owner (_memory_owner), by name or list index."""
    if buffers is None:
        return {}
    items = buffers.items() if isinstance(buffers, dict) else enumerate(buffers)
    return {k: _memory_owner(v) for k, v in items if v is not None}


def placement_from_mpi(mpi_comm):
    """(hosts, devices) of every rank of an mpi4py communicator, as
    reshard_mpi_placement derives them (collective): hosts from the MPI
    shared-memory split or each rank's RESHARD_HOST, devices from RESHARD_DEVICE
    (DEVICE_CPU where unset). Pass them to Plan(..., hosts=, devices=)."""
    if not _lib.has("reshard_mpi_placement"):
        raise error(Status.UNSUPPORTED, "this libreshard was built without MPI")
    from mpi4py import MPI
    fn = _lib.lib.reshard_mpi_placement
    handle_type = _lib.c_vp if MPI._sizeof(MPI.Comm) == ctypes.sizeof(_lib.c_vp) else ctypes.c_int
    fn.argtypes = [handle_type, ctypes.POINTER(_lib.c_i32), ctypes.POINTER(_lib.c_i32)]
    n = mpi_comm.Get_size()
    hosts, devices = (_lib.c_i32 * n)(), (_lib.c_i32 * n)()
    _lib.check(fn(handle_type(MPI._handleof(mpi_comm)), hosts, devices))
    return list(hosts), list(devices)


class Plan(_lib.Handle):
    """The plan of rank ``rank`` (or ALL_RANKS for global statistics) for moving
    ``src`` to ``dst`` on ``world`` ranks; pure computation, nothing is sent.

    domain_size  ranks per NVLink domain (0/1: every rank its own domain)
    staging_mb   staging memory bound per rank, MiB (default 256)
    relay_mb     relay scratch bound per rank, MiB (default none)
    timeout_s    a silent peer fails the execution after this many seconds (default
                 DEFAULT_TIMEOUT_S, 60: RESHARD_DEFAULT_TIMEOUT_S, as the command line's)
    summary      ALL_RANKS only: keep counters and per-stream totals, not pieces
                 (statistics and pair_bytes of a plan too large to hold; not executable)
    hosts        where ranks live: a host id (int >= 0) per rank, ``world`` of them
                 (reshard.placement_from_mpi(comm) derives them from the launch); the
                 planner then takes each piece from the nearest holder, and stats()
                 counts bytes by path (bytes_same_device, bytes_same_host,
                 bytes_cross_host) with their bounds (bound_*_bytes)
    devices      with hosts: a GPU index per rank (DEVICE_CPU = -1 for host memory)
    colocated    with hosts: pieces between ranks of one host are one-sided reads
                 (the receiver copies from the sender's buffer: process_vm_readv for
                 host memory; docs/colocated.md); source tensors must stay bound to
                 the same memory for the plan's life (another is BUFFER on every
                 rank before anything moves)
    delta        a delta refit plan (docs/delta.md): each execute sends only the words
                 that changed since the version the destination holds; delta_info()
                 tells a rank's version and whether its weights are committed or torn.
                 Keep the same destination tensors between executes: the plan keeps a
                 weak reference to each bound tensor's memory owner (its base: views of
                 the same array or tensor count as the same); a destination bound to a
                 new object (even one allocated again at the freed address) makes that
                 rank's execute dense (delta_invalidate), exact. Every comm: torch
                 gloo groups (Comm.from_torch), MPI, in-process and NCCL (device
                 encode/apply kernels, docs/delta-verification.md, "On device memory"); the
                 one call:
                 Model.plan(comm, train, infer, delta=True)
    verify       delta plans verify by default (verify=None or True): every chunk
                 carries the sender's 64-bit hash of its new bytes (XXH3 on host
                 memory, the NCCL transport's hash kernel on device memory), compared by
                 the receiver after apply; a destination changed behind reshard's back
                 fails the execute on every rank (ReshardError RESHARD_ERR_VERIFY naming
                 tensor, rank and box), its weights are torn and the next execute
                 rewrites them dense. verify=False is the opt-out: it promises that
                 between executes every destination holds exactly what this plan's last
                 committed execute wrote (no reallocation even at the same address, no
                 other writer, no in-place rewrite by the engine); docs/delta-verification.md gives
                 its cost. verify=True without delta: ValueError
    checksum     the older name of verify (True / False), kept for callers of it
    name         which plan this is among a rank's live plans made from the same inputs
                 (reshard_plan_set_name; str of 1 to 63 bytes, the same on every rank):
                 plans of equal inputs (a policy and a reference model of one
                 architecture, two engines' plans of equal layouts) pair across ranks by
                 name, else by their number, fixed when each is made: the smallest no
                 unnamed live one of one thread of the rank then held (close() the ones
                 you will not execute again);
                 ranks executing different ones fail on every rank (MISMATCH), nothing
                 moves. Name them where ranks may create them in another order, or where
                 plans made on different threads share one comm
    comm         optional: when planning fails, tell the peers through this comm
                 (plan_fail: their execute fails at once, naming this rank), then
                 raise; this waits until the peers reach execute; execute's default

    The common path is one call, Model.plan(comm, train, infer) (or Refit.plan(comm)):
    the rank and world come from the comm. This explicit form is for tests and for
    layouts written by hand.

    Raises ReshardError with the C message (SHAPE, DTYPE, UNCOVERED, OVERLAP, RANK,
    BUFFER, STAGING, ...). Python adds no planning of its own. Before that, every
    number is checked, never coerced: TypeError unless rank, world and domain_size
    are ints and staging_mb, relay_mb and timeout_s numbers (never bools or str);
    ValueError for rank outside [ALL_RANKS, 2**31), world outside [1, 2**31),
    domain_size outside [0, 2**31), staging_mb or relay_mb outside [0, 2**44) MiB.
    """

    _destroy = "reshard_plan_destroy"

    def __init__(self, src, dst, rank, world, domain_size=None, staging_mb=None,
                 relay_mb=None, timeout_s=None, comm=None, summary=False, hosts=None,
                 devices=None, colocated=False, delta=False, checksum=None, verify=None,
                 name=None):
        if not isinstance(src, Layout) or not isinstance(dst, Layout):
            raise TypeError("reshard: Plan(src, dst, ...) needs two reshard.Layout")
        world = _lib.as_int(world, "world", lo=1)
        rank = _lib.as_int(rank, "rank", lo=ALL_RANKS)
        p = _lib.PlanParams(world_size=world, my_rank=rank)
        if domain_size is not None:
            p.field_mask |= _lib.PARAM_DOMAIN_SIZE
            p.domain_size = _lib.as_int(domain_size, "domain_size", lo=0)
        if staging_mb is not None:
            p.field_mask |= _lib.PARAM_STAGING_BYTES
            p.staging_bytes = _lib.as_mib_bytes(staging_mb, "staging_mb")
        if relay_mb is not None:
            p.field_mask |= _lib.PARAM_RELAY_BYTES
            p.relay_bytes = _lib.as_mib_bytes(relay_mb, "relay_mb")
        if timeout_s is not None:
            if isinstance(timeout_s, (bool, str, bytes)) or not hasattr(timeout_s, "__float__"):
                raise TypeError("reshard: timeout_s must be a number of seconds, got %r"
                                % (timeout_s,))
            p.field_mask |= _lib.PARAM_TIMEOUT
            p.timeout_s = float(timeout_s)
        if summary:
            p.field_mask |= _lib.PARAM_SUMMARY
            p.summary = 1
        self._placement = _placement(p, world, hosts, devices, colocated)
        if not isinstance(delta, bool):
            raise TypeError("reshard: delta must be True or False, got %r" % (delta,))
        if delta:
            p.field_mask |= _lib.PARAM_DELTA
            p.delta = 1
        for flag, v in (("verify", verify), ("checksum", checksum)):
            if v is not None and not isinstance(v, bool):
                raise TypeError("reshard: %s must be True or False, got %r" % (flag, v))
        if verify is not None and checksum is not None and verify != checksum:
            raise ValueError("reshard: verify=%r and checksum=%r disagree (checksum is the "
                             "older name of verify)" % (verify, checksum))
        verify = verify if verify is not None else checksum
        if verify and not delta:
            raise ValueError("reshard: verify=True checks delta refits: set delta=True")
        if verify is not None and delta:  # else the library's default: on for delta plans
            p.field_mask |= _lib.PARAM_DELTA_CHECKSUM
            p.delta_checksum = int(verify)
        self.src, self.dst = src, dst  # the C plan reads them; keep them alive
        self.rank, self.world = rank, world
        self.timeout_s = timeout_s
        self.comm = comm  # execute's default
        self.refit = None  # set by Refit.plan / Model.plan
        self._delta = delta
        # delta: per rank, the weak references to the destination owners (_owners) of the
        # last execute that returned OK; another object bound is sent dense (execute)
        self._bound = {}
        self._h = None
        h = _lib.c_vp()
        status = _lib.lib.reshard_plan_create(src._h, dst._h, ctypes.byref(p), ctypes.byref(h))
        if status != 0 and comm is not None:
            name, message = _lib.lib.reshard_status_string(status).decode(), _lib.last_error()
            plan_fail(comm, status, timeout_s)
            raise ReshardError(status, name, message)
        _lib.check(status)
        self._h = h.value
        if name is not None:
            if not isinstance(name, str):
                raise TypeError("reshard: name must be a str, got %r" % (name,))
            _lib.check(_lib.lib.reshard_plan_set_name(self._h, name.encode()))
        self.name = name

    def stats(self):
        """Byte counters (reshard_plan_stats_t) as a dict: bytes_total, bytes_local,
        bytes_network, bytes_nvlink, bytes_lower_bound, max_nic_send_bytes, ...;
        for a rank's own plan, that rank's share."""
        s = _lib.PlanStats()
        _lib.check(_lib.lib.reshard_plan_get_stats(self._h, ctypes.byref(s)))
        return {k: getattr(s, k) for k in _STAT_KEYS}

    def delta_info(self, rank=None):
        """The delta state of ``rank`` (default the plan's rank; any rank of an
        ALL_RANKS plan) as a dict (reshard_delta_info_t): version (committed refits),
        state ("none", "committed" or "torn": torn weights must not be used; the next
        successful execute rewrites them whole), snapshot_bytes (host memory of the
        bytes this rank last sent), relay_bytes, and of the last execute stream_bytes,
        wire_bytes, changed_bytes, chunks (dense, bitmap, runs) and dense_streams.
        Raises ReshardError (INVALID_ARG for a plan made without delta, RANK)."""
        if rank is None:
            rank = self.rank
        info = _lib.DeltaInfo()
        _lib.check(_lib.lib.reshard_plan_delta_info(self._h, _lib.as_int(rank, "rank"),
                                                    ctypes.byref(info)))
        out = {k: getattr(info, k) for k, _ in _lib.DeltaInfo._fields_}
        out["state"] = _lib.lib.reshard_delta_state_string(info.state).decode()
        out["chunks"] = list(info.chunks)
        return out

    def delta_adopt(self, old, rank=None):
        """Elastic refit / replanning (reshard_plan_delta_adopt): before this delta plan's
        first execute, take over ``rank``'s (default the plan's rank) version,
        destination state and snapshot from ``old``, the delta plan this rank executed
        last with the others; streams whose boxes ``old`` sent are then encoded against
        it, the rest go dense once. A new or restarted rank does not call it. ``old``
        keeps nothing for that rank afterwards (executed again it is dense) and no
        longer counts among the rank's plans of these inputs. Raises ReshardError
        (INVALID_ARG, MISMATCH, RANK, NOMEM)."""
        if not isinstance(old, Plan):
            raise TypeError("reshard: delta_adopt needs a reshard.Plan, got %r" % (old,))
        if rank is None:
            rank = self.rank
        _lib.check(_lib.lib.reshard_plan_delta_adopt(self._h, old._h,
                                                     _lib.as_int(rank, "rank")))
        bound = getattr(old, "_bound", {}).pop(rank, None)
        if bound is not None:  # the destination objects old's version is in
            self._bound[rank] = bound

    def close(self):
        """Free the plan now (reshard_plan_destroy) rather than when the object goes: a
        plan replaced by another of the same inputs then no longer counts in their
        identity, even where something (an exception's traceback) still holds this
        object. A later execute raises ReshardError (INVALID_ARG). Idempotent."""
        if self._h:
            _lib.lib.reshard_plan_destroy(self._h)
            self._h = None

    def delta_invalidate(self, rank=None):
        """reshard_plan_delta_invalidate: ``rank``'s (default the plan's rank) destination
        tensors no longer hold what the last committed execute wrote (an engine changed
        them in place): its next execute receives everything dense. New tensor objects
        (even at the same address) need no call: execute sees them and calls this. Raises ReshardError (INVALID_ARG for a plan made
        without delta, RANK)."""
        if rank is None:
            rank = self.rank
        _lib.check(_lib.lib.reshard_plan_delta_invalidate(self._h, _lib.as_int(rank, "rank")))

    def pair_bytes(self, src_rank, dst_rank):
        """Bytes this plan sends from ``src_rank`` to ``dst_rank``."""
        return _lib.lib.reshard_plan_pair_bytes(self._h, _lib.as_int(src_rank, "src_rank"),
                                                 _lib.as_int(dst_rank, "dst_rank"))

    def execute(self, comm=None, src=None, dst=None):
        """Move the bytes: this rank's source tensors ``src`` and destination tensors
        ``dst``, each a name -> tensor dict (e.g. dict(module.named_parameters())) or a
        list by buffer id, over ``comm`` (default the comm the plan was made with).
        Every rank of the comm calls it. Returns this rank's measured byte counts as a
        dict.

        Checked before anything moves, naming the parameter: the comm is open and has
        the plan's rank and size, a name the layout does not declare for this rank, a
        declared one missing, a dtype, a shape, a non-contiguous tensor, a tensor in
        memory the comm does not move (CPU for NCCL, CUDA for MPI and in-process), a
        read-only array, an object that is not a tensor (or whose data_ptr() raises).
        Such a rank does not execute: it calls reshard_plan_fail with BUFFER (as a
        rank whose plan failed), so every peer's execute fails at once
        with that status naming this rank, and nothing moves; this rank then raises
        ReshardError with its own message (chained to the Python exception, if one).
        A binding error takes precedence over MISMATCH: a rank planned from other
        layouts usually fails binding by name first, and then every rank reports its
        status (BUFFER), not MISMATCH; MISMATCH comes when every binding passed."""
        if comm is None:
            comm = self.comm
        comm_open(comm)
        if not self._h:
            self._fail(comm, [(Status.INVALID_ARG, "reshard_plan_execute: rank %d: the plan "
                               "was closed (Plan.close)" % comm.rank)])
        if comm.rank != self.rank and self.rank != ALL_RANKS or comm.size != self.world:
            self._fail(comm, [(Status.INVALID_ARG, "reshard_plan_execute: comm is rank %d of %d, "
                               "the plan is for rank %d of %d"
                               % (comm.rank, comm.size, self.rank, self.world))])
        rank = comm.rank if self.rank == ALL_RANKS else self.rank
        try:
            s_arr, n_src, s_views, problems = bind(self.src, rank, src, "source", comm.device,
                                                   False)
            d_arr, n_dst, d_views, d_problems = bind(self.dst, rank, dst, "destination",
                                                     comm.device, True)
        except BindingFailed as e:  # an object that is not a tensor, data_ptr() raised
            self._fail(comm, [(Status.BUFFER, str(e))], cause=e.__cause__)
        except Exception as e:  # noqa: BLE001 - every binding failure fails every rank
            self._fail(comm, [(Status.BUFFER, "rank %d: binding the buffers failed: %s: %s"
                               % (rank, type(e).__name__, e))], cause=e)
        problems += d_problems
        if problems:
            self._fail(comm, problems)
        owners = _owners(dst) if self._delta else None
        if owners is not None:
            self._rebind(rank, owners)
        out = comm._execute(lambda h, st: _lib.lib.reshard_plan_execute(
            self._h, h, s_arr, n_src, d_arr, n_dst, st), (s_views, d_views))
        if owners is not None:
            self._bound[rank] = {k: None if o is None else weakref.ref(o)
                                 for k, o in owners.items()}
        return out

    def _rebind(self, rank, owners):
        """Delta: before ``rank`` executes into the destinations whose memory owners are
        ``owners``: unless each is (alive, the same object) the owner of the last execute
        that returned OK, that memory may be new (a freed address taken again holds other
        bytes than the committed version): delta_invalidate, so its streams go dense.
        Until this execute returns OK nothing is recorded (a failed one: dense next)."""
        last = self._bound.pop(rank, None)
        same = last is not None and last.keys() == owners.keys() and all(
            o is not None and last[k] is not None and last[k]() is o for k, o in owners.items())
        if not same:
            self.delta_invalidate(rank)

    def _fail(self, comm, problems, cause=None):
        """This rank cannot execute: tell the peers (reshard_plan_fail with BUFFER, so
        that they fail at once, naming this rank), then raise the problems."""
        h = comm._enter()
        try:
            told = _lib.lib.reshard_plan_fail_reason(h, int(Status.BUFFER),
                                                     problems_message(problems).encode(),
                                                     float(self.timeout_s or 0))
        finally:
            comm._leave()
        note = None if told == 0 else _lib.last_error()
        try:
            raise_problems(problems, note)
        except ReshardError as e:
            raise e from cause


def comm_open(comm):
    """Raise ReshardError (INVALID_ARG) unless ``comm`` is an open Comm."""
    if not hasattr(comm, "_handle"):
        raise TypeError("reshard: a comm is a reshard.Comm, not %s" % type(comm).__name__)
    comm._handle()


def plan_fail(comm, status, timeout_s=None):
    """Tell the peers on ``comm`` that this rank could not make its plan (``status``:
    a Status, an int, or the ReshardError Plan raised), where execute would have
    been called: every peer's execute then fails at once with that status, naming
    this rank and its reason (the ReshardError's message, else the last error; the
    first 240 bytes), and nothing moves. Waits for the peers to arrive (``timeout_s``,
    default DEFAULT_TIMEOUT_S). Raises ReshardError (TIMEOUT, TRANSPORT: destroy the comm)."""
    reason = None
    if isinstance(status, ReshardError):
        status, reason = status.status, status.message
    comm_open(comm)
    _lib.check(_lib.lib.reshard_plan_fail_reason(
        comm._h, int(status), None if reason is None else str(reason).encode(),
        float(timeout_s or 0)))
