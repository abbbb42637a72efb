"""Shared by the one-machine refit benchmarks (fsdp_refit.py, sglang_refit.py): start
one process per rank, collect the JSON line each prints, and print the paths' median
times side by side."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from typing import Any, Dict, List, Tuple


def run_ranks(argv: List[str], world: int, name: str,
              timeout_s: float = 900) -> List[Dict[str, Any]]:
    """Run ``argv + ["--rank", r]`` for every rank r (OMP_NUM_THREADS=1); return the JSON
    reports. Exits "<name>: FAILED" naming each rank that failed or did not report."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen(argv + ["--rank", str(r)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    reps, errs = [], []
    for r, p in enumerate(procs):
        o, e = p.communicate(timeout=timeout_s)
        reps += [json.loads(x) for x in o.splitlines() if x.startswith("{")]
        if p.returncode:
            errs.append("rank %d: exit %d: %s" % (r, p.returncode, e.strip()[-2000:]))
    if errs or len(reps) != world:
        sys.exit("%s: FAILED\n%s" % (name, "\n".join(errs)))
    return reps


def print_paths(reps: List[Dict[str, Any]], paths: List[Tuple[str, str]], width: int) -> bool:
    """One row per (label, key prefix) of ``paths``: the slowest rank's median of
    reps[prefix + "times"], elements checked and wrong; then the first path's speed-up
    over the second. Returns whether every element matched."""
    print("%-*s %10s %14s %8s" % (width, "path", "median s", "elements", "wrong"))
    meds = []
    for label, key in paths:
        meds.append(max(statistics.median(r[key + "times"]) for r in reps))
        print("%-*s %10.4f %14d %8d" % (width, label, meds[-1],
                                         sum(r[key + "checked"] for r in reps),
                                         sum(r[key + "wrong"] for r in reps)))
    if len(meds) > 1:
        print("reshard speed-up: %.2fx" % (meds[1] / meds[0]))
    return all(r[key + "wrong"] == 0 for r in reps for _, key in paths)
