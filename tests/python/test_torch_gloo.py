"""Refits over a torch.distributed gloo group of separately started processes
(Comm.from_torch): each test starts 4 processes of torch_worker.py that meet through
a FileStore and refit over the group; every destination element is checked by the
worker, and failures must name the culprit on every rank within the bound."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch without gloo")

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_worker.py")
WORLD = 4


def run_group(cases, tmp_path, timeout_s=30.0, wait_s=300.0, expect_exit=None):
    """Start the WORLD ranks running ``cases`` (comma-separated) one after another on
    one comm; return their JSON reports by rank and case (a rank that printed none,
    e.g. the one killed or stalled on purpose, is missing). Ranks still running once
    the others reported are killed (a stalled one sleeps on)."""
    store = tmp_path / "store"
    procs = [subprocess.Popen([sys.executable, WORKER, cases, str(r), str(WORLD), str(store),
                               str(tmp_path), str(timeout_s)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(WORLD)]
    reports, deadline = {}, time.monotonic() + wait_s  # rank -> case -> report
    for r, p in enumerate(procs):
        if expect_exit is not None and r == expect_exit:
            continue
        try:
            out, err = p.communicate(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        for line in out.splitlines():
            if line.startswith("{"):
                rep = json.loads(line)
                reports.setdefault(r, {})[rep["case"]] = rep
        assert r in reports, "rank %d printed no report:\n%s\n%s" % (r, out, err[-3000:])
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()
    return reports


GOOD = {  # case: the ranks whose destination elements it checks
    "dense": (2, 3),        # Megatron tp=2 -> vLLM tp=2, checked by the frameworks' rules
    "forwards": (2, 3),     # two domains: landed once, forwarded to the other dp replica
    "dtensor": (0, 1, 2, 3),  # StridedShard and 2-d meshes, a numpy oracle
    "moe": (2, 3),          # experts: ep=2 -> vLLM expert parallelism, every element
    "fp8": (2, 3),          # bf16 -> FP8 blocks with scales, the reference quantizer
}


@pytest.fixture(scope="module")
def good_group(tmp_path_factory):
    """One group of 4 processes runs every good case, then the mismatch, on one comm
    (a refused execution leaves the comm usable)."""
    return run_group(",".join(list(GOOD) + ["mismatch"]), tmp_path_factory.mktemp("good"))


@pytest.mark.parametrize("case", sorted(GOOD))
def test_refit_over_gloo(case, good_group):
    for r in range(WORLD):
        rep = good_group[r][case]
        assert rep["ok"], "rank %d: %s: %s" % (r, rep["status"], rep["message"])
    for r in GOOD[case]:
        assert good_group[r][case]["verified"] > 0, good_group[r][case]


def test_planning_from_other_layouts_over_gloo(good_group):
    """Rank 3 plans from another destination layout: MISMATCH on every rank at the
    first agreement, naming it, nothing written (the worker checks the sentinels)."""
    for r in range(WORLD):
        rep = good_group[r]["mismatch"]
        assert rep["status"] == "MISMATCH", rep
        assert rep["message"].startswith(
            "rank %d: ranks 0 and 3 planned from different inputs (the layouts, the declared "
            "buffers differ; the first tensor where they do: 0 ('x' on this rank))" % r), rep


@pytest.mark.parametrize("case,status", [("stall", "TIMEOUT"), ("kill", "TRANSPORT")])
def test_failing_peer_named_on_every_rank(case, status, tmp_path):
    """Rank 2 stops on its second post, mid-refit: it stalls (sleeps on) or is killed.
    Every other rank fails with an error naming rank 2, within the bound: the round
    wait's timeout plus the agreement's grace (about 3.5 s for 3 s)."""
    timeout_s = 3.0
    t0 = time.monotonic()
    reports = run_group(case, tmp_path, timeout_s=timeout_s, expect_exit=2)
    assert sorted(reports) == [0, 1, 3]
    for r, by_case in reports.items():
        rep = by_case[case]
        assert rep["status"] == status, rep
        assert rep["message"].startswith("rank %d: rank(s) 2 stalled or died" % r), rep
        assert rep["elapsed"] < 2 * timeout_s + 1.0, rep
    assert time.monotonic() - t0 < 120


@pytest.mark.parametrize("case,status", [("stop_deciding", "TIMEOUT"),
                                         ("stop_confirming", "OK")])
def test_outcome_is_one_verdict(case, status, tmp_path):
    """Rank 2 stops inside the outcome agreement of its refit. Deciding (it posted its
    receive for rank 0 only): rank 0 could decide OK while 1 and 3 fail; they give up
    and tell it, so all three fail. Confirming (its confirmation reached rank 0 only):
    nobody gave up, so the decision stands: all three return OK, the refit verified.
    Every survivor returns the same verdict, within twice the timeout (confirming: a
    grace, not 2 x timeout_s + grace as before)."""
    timeout_s = 2.0
    reports = run_group(case, tmp_path, timeout_s=timeout_s, expect_exit=2)
    assert sorted(reports) == [0, 1, 3]
    for r, by_case in reports.items():
        rep = by_case[case]
        assert rep["status"] == status, rep
        # twice the timeout from the stop (elapsed also counts planning and the refit)
        assert rep["elapsed"] < 2 * timeout_s + 0.5, rep
        if status == "TIMEOUT":
            assert "rank(s) 2 " in rep["message"] or "gave up waiting" in rep["message"], rep
        elif r == 3:
            assert rep["verified"] > 0, rep


def test_stop_in_the_first_confirmation_fails_every_rank_within_twice_the_timeout(tmp_path):
    """Rank 2 decides the first agreement of its refit and stops while confirming it
    (ranks 1 and 3 never get its confirmation). Every other rank fails naming rank 2
    within twice the timeout of the stop (before: 2.5 times, plus one more grace, since
    they waited 2 x timeout_s + grace for that confirmation, then blamed "a failure of
    an earlier execution")."""
    timeout_s = 2.0
    reports = run_group("stop_confirming_first", tmp_path, timeout_s=timeout_s, expect_exit=2)
    assert sorted(reports) == [0, 1, 3]
    for r, by_case in reports.items():
        rep = by_case["stop_confirming_first"]
        assert rep["status"] == "TIMEOUT", rep
        assert rep["message"].startswith("rank %d: rank(s) 2 stalled or died" % r), rep
        assert "earlier" not in rep["message"], rep
        assert rep["elapsed"] < 2 * timeout_s, rep


def test_stop_in_the_last_confirmation_fails_the_next_refit_within_twice_the_timeout(tmp_path):
    """Rank 2 decides the last agreement of its first refit and stops while confirming it
    (to rank 0 only). The first refit stands, OK and exact, on ranks 0, 1 and 3; the
    second fails on each naming rank 2 within twice the timeout of the stop (before: the
    owed confirmation's grace came on top, 2 x timeout_s + 0.5 s)."""
    timeout_s = 2.0
    reports = run_group("stop_confirming_last", tmp_path, timeout_s=timeout_s, expect_exit=2)
    stopped = float((tmp_path / "stopped_at").read_text())
    assert sorted(reports) == [0, 1, 3]
    for r, by_case in reports.items():
        rep = by_case["stop_confirming_last"]
        assert rep["status"] == "TIMEOUT", rep
        assert "rank(s) 2 " in rep["message"], rep
        assert rep["ended"] - stopped < 2 * timeout_s + 0.2, (rep["ended"] - stopped, rep)


def test_a_late_confirmation_is_taken_in_the_next_agreement(tmp_path):
    """Rank 2 confirms both agreements of its first refit to ranks 1 and 3 three quarters
    of a timeout late (paused, not stalled): they decide without it and take it in the
    next agreement, which waits for a slow peer as long as for any (not the grace of a
    failed one); both refits on the comm are exact on every inference rank (the comm is
    not broken)."""
    reports = run_group("slow_confirming", tmp_path, timeout_s=2.0)
    for r in range(WORLD):
        rep = reports[r]["slow_confirming"]
        assert rep["ok"], rep
        assert (rep["verified"] > 0) == (r >= 2), rep  # every element of both refits


def test_rank_that_never_arrives_is_named(tmp_path):
    """Rank 1 never calls execute: the others wait for its agreement message at most
    twice the timeout (a peer may still be inside a round wait) and name it."""
    timeout_s = 2.0
    reports = run_group("absent", tmp_path, timeout_s=timeout_s, expect_exit=1)
    assert sorted(reports) == [0, 2, 3]
    for r, by_case in reports.items():
        rep = by_case["absent"]
        assert rep["status"] == "TIMEOUT", rep
        assert "rank(s) 1 did not reach the end of the execution" in rep["message"], rep
        assert "at most 2 x timeout_s = 4.0 s" in rep["message"], rep  # a bound, worded so
        assert 2 * timeout_s - 0.5 < rep["elapsed"] < 2 * timeout_s + 2.0, rep


def test_two_named_comms_on_one_group_from_threads(tmp_path):
    """Two comms per rank on the one group, each used by its own thread with its own
    plan and values at the same time: every element of both exact on both engine
    ranks; an unnamed comm made off the main thread, and a second unnamed comm beside
    the live one, refused on every rank."""
    reports = run_group("two_comms", tmp_path)
    for r in range(WORLD):
        rep = reports[r]["two_comms"]
        assert rep["ok"], rep
        assert rep["verified"] == (2 * 5 * 64 * 24 if r >= 2 else 0), rep


def test_stalled_delta_sender_fails_every_rank_within_the_bound(tmp_path):
    """Rank 0 stalls on its fourth post of a delta refit (the first round's headers):
    every other rank fails naming it within about twice the timeout (a round wait, then
    the agreement cut to its grace once the stalled rank is the only one missing), not
    three times (a round wait of the headers, then one of the bodies, then the agreement's
    full wait)."""
    timeout_s = 2.0
    reports = run_group("stall_delta", tmp_path, timeout_s=timeout_s, expect_exit=0)
    assert sorted(reports) == [1, 2, 3]
    for r, by_case in reports.items():
        rep = by_case["stall_delta"]
        assert not rep["ok"] and rep["status"] == "TIMEOUT", rep
        assert "0" in rep["message"], rep
        assert rep["elapsed"] < 2 * timeout_s + 1.0, rep
