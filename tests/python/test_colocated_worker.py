"""The engine integration's colocated mode (ReshardInitInfo colocated=True): trainer
ranks and vLLM-shaped workers as threads of this process, over gloo; every piece
between ranks is a one-sided read of the trainer's tensors (process_vm_readv of this
process), every element checked against conventions.py (the frameworks' rules)."""

import threading

import pytest

pytest.importorskip("torch")

import reshard  # noqa: E402
from reshard.integrations import WorkerCore  # noqa: E402
from test_integrations import assert_all, dense_case, parallel, refit_threads  # noqa: E402


@pytest.mark.parametrize("colocated", [False, True])
def test_colocated_worker_refit(tmp_path, monkeypatch, colocated):
    path, sources, expect, models = dense_case(tmp_path)
    workers = [WorkerCore(m, parallel("tp=2", i)) for i, m in enumerate(models)]
    got, lock, real = [], threading.Lock(), reshard.Plan.execute

    def execute(self, *a, **kw):  # every rank's execution stats
        out = real(self, *a, **kw)
        with lock:
            got.append(out)
        return out
    monkeypatch.setattr(reshard.Plan, "execute", execute)
    info = dict(colocated=True, hosts=[0, 0, 0, 0], devices=[0, 1, 0, 1]) if colocated else {}
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", sources, workers, steps=2, **info)
    assert errors == {}
    assert_all(models, expect)
    assert len(got) == 8  # 4 ranks, 2 refits
    read = sum(g["bytes_peer_read"] for g in got)
    recv = sum(g["bytes_recv"] for g in got)
    assert (read > 0 and recv == 0) if colocated else (read == 0 and recv > 0)
