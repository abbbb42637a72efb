"""Following the engines' live EPLB maps across refits, engine-independent.

vLLM's expert load balancer (--enable-eplb) moves experts between physical slots
while the engine serves, and each independent engine keeps its own map (its own
EplbState). The refit's layout must put each logical expert into the slots that hold
it now: at every refit, the first worker of each engine publishes the map its engine
holds (``physical_to_logical`` rows, one per MoE layer) in the refit's store under
that refit's version; every rank of the refit (trainer ranks and workers) reads every
engine's map there and, where it differs from the map its plan was made with, makes
its plan again with it (each rank only its own part, Model.refit(rank=...)). Every
other worker compares the map its engine holds with the published one: a worker
whose map differs (a balancer out of step) fails the refit on every rank, naming the
layer, instead of writing experts into stale slots.

How a map is read from a live engine is the engine shell's (vllm.py
``vllm_eplb_map``); this module only moves and checks maps."""

from __future__ import annotations

import datetime
import json
from typing import Any, List, Optional

from ..errors import Status, error

Rows = List[List[int]]


def key(version: int, engine: int) -> str:
    """The store key of ``engine``'s map for refit ``version``."""
    return "eplb/%d/%d" % (version, engine)


def publish(store: Any, version: int, engine: int, rows: Optional[Rows],
            failure: str = "") -> None:
    """The engine's first worker: its engine's map for refit ``version`` (``rows``),
    or why it has none (``failure``), so that no peer waits for it."""
    store.set(key(version, engine), json.dumps({"rows": rows, "error": failure}))


def collect(store: Any, version: int, engines: int, timeout_s: float,
            who: str) -> List[Rows]:
    """Every engine's map for refit ``version`` (engine order), each waited for at
    most ``timeout_s``. Raises ReshardError (TIMEOUT naming the
    engine whose map did not come: its first worker dead, stalled, or not following
    EPLB; CONFIG with the first worker's reason where it could not read its map)."""
    maps: List[Rows] = []
    for e in range(engines):
        k = key(version, e)
        try:
            store.wait([k], datetime.timedelta(seconds=timeout_s))
        except RuntimeError as exc:  # torch's bare "Wait timeout": name the engine
            raise error(Status.TIMEOUT, "%s: refit %d: engine %d's EPLB map did not arrive "
                        "within %.1f s (its first worker is dead or stalled, or does not "
                        "follow EPLB: init info eplb=True on every rank)"
                        % (who, version, e, timeout_s)) from exc
        got = json.loads(store.get(k))
        if got["error"]:
            raise error(Status.CONFIG, "%s: refit %d: engine %d has no EPLB map to give: %s"
                        % (who, version, e, got["error"]))
        maps.append(got["rows"])
    return maps


def physical_to_logical(l2p: Any, count: Any, where: str) -> List[int]:
    """vLLM's physical_to_logical row from one MoE layer's EplbState rows:
    ``l2p`` [E, max replicas] (logical expert e's slots, -1 padded) and ``count`` [E]
    (its replica count): slot p holds the logical expert whose replicas list p.
    Raises ReshardError (CONFIG naming ``where``) for a slot held twice, a slot out of
    range, or a slot no expert holds."""
    l2p = [[int(x) for x in row] for row in _rows(l2p)]
    count = [int(c) for c in _rows(count)]
    if len(count) != len(l2p):
        raise error(Status.CONFIG, "%s: EPLB logical_to_physical_map has %d experts, "
                    "logical_replica_count %d" % (where, len(l2p), len(count)))
    n = sum(count)
    out = [-1] * n
    for e, (row, c) in enumerate(zip(l2p, count)):
        if not 1 <= c <= len(row):
            raise error(Status.CONFIG, "%s: EPLB: logical expert %d has %d replicas (of "
                        "%d listed)" % (where, e, c, len(row)))
        for p in row[:c]:
            if not 0 <= p < n or out[p] != -1:
                raise error(Status.CONFIG, "%s: EPLB: logical expert %d lists physical "
                            "slot %d, %s" % (where, e, p, "outside [0, %d)" % n
                                             if not 0 <= p < n else
                                             "which expert %d holds too" % out[p]))
            out[p] = e
    return out


def _rows(t: Any) -> Any:
    return t.tolist() if hasattr(t, "tolist") else t


def first_difference(mine: Rows, theirs: Rows) -> str:
    """Where two maps differ ("" where they do not): the MoE layer and slot."""
    if len(mine) != len(theirs):
        return "%d MoE layers, the published map %d" % (len(mine), len(theirs))
    for k, (a, b) in enumerate(zip(mine, theirs)):
        if list(a) != list(b):
            p = next((p for p, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            return ("MoE layer %d, slot %d: logical expert %s here, %s in the published map"
                    % (k, p, a[p] if p < len(a) else "none", b[p] if p < len(b) else "none"))
    return ""


def one_engine(maps: List[Rows]) -> Any:
    """The eplb_map argument of Model.refit for ``maps`` (one per engine): one
    engine's rows as they are, several engines' as the list of each engine's."""
    return maps[0] if len(maps) == 1 else maps
