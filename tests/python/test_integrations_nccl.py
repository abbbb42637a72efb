"""The engine integrations over NCCL (transport "nccl": CUDA tensors, the communicator
bootstrapped through the refit's store), without a GPU: ranks are threads of this
process over the fake CUDA runtime + NCCL of tests/gpu (ctest
python_fake_nccl_integrations; its device memory is host memory). The model tensors
are torch CPU tensors presented as CUDA ones. Every destination element is checked
against conventions.py (the frameworks' rules). Elsewhere skipped."""

import pytest

torch = pytest.importorskip("torch")

import conventions  # noqa: E402
from reshard.integrations import WorkerCore  # noqa: E402
from test_integrations import SENT, dense_case, parallel, refit_threads  # noqa: E402
from test_nccl_rejoin import needs_fake_nccl  # noqa: E402

CUDA = type("Device", (), {"type": "cuda", "index": None})()


class CudaView:
    """A torch CPU tensor presented as a CUDA tensor (what reshard reads of one)."""

    def __init__(self, t, device=CUDA):
        self.t, self.device, self.dtype, self.shape = t, device, t.dtype, t.shape

    def data_ptr(self):
        return self.t.data_ptr()

    def numel(self):
        return self.t.numel()

    def element_size(self):
        return self.t.element_size()

    def is_contiguous(self):
        return self.t.is_contiguous()


class Model:
    """named_parameters() / named_buffers() of CudaView tensors."""

    def __init__(self, params):
        self.params = params

    def named_parameters(self):
        return iter(self.params.items())

    def named_buffers(self):
        return iter(())

    def named_modules(self):
        return iter([("", self)])


def cuda_models(sources, models):
    src = [Model({n: CudaView(t) for n, t in s.module.module.named_parameters()})
           for s in sources]
    dst = [Model({n: CudaView(t) for n, t in m.named_parameters()}) for m in models]
    return src, dst


@needs_fake_nccl
def test_refit_over_nccl_through_the_store(tmp_path):
    path, sources, expect, models = dense_case(tmp_path, "tp=2", "tp=1,dp=2")
    src, dst = cuda_models(sources, models)
    workers = [WorkerCore(m, parallel("tp=1,dp=2", i), CUDA) for i, m in enumerate(dst)]
    errors = refit_threads(tmp_path, path, "tp=2", "tp=1,dp=2", src, workers, steps=2,
                           transport="nccl")
    assert errors == {}
    for i, m in enumerate(models):
        for n, e in expect[i].items():
            got = dict(m.named_parameters())[n].detach()
            assert conventions.mismatches(got, e) == 0, (i, n)


@needs_fake_nccl
def test_cpu_tensor_refused_for_nccl(tmp_path):
    path, sources, expect, models = dense_case(tmp_path, "tp=2", "tp=2")
    src, dst = cuda_models(sources, models)
    name = "model.norm.weight"
    dst[1].params[name] = CudaView(dst[1].params[name].t, torch.device("cpu"))
    workers = [WorkerCore(m, parallel("tp=2", i), CUDA) for i, m in enumerate(dst)]
    errors = refit_threads(tmp_path, path, "tp=2", "tp=2", src, workers, transport="nccl")
    assert sorted(errors) == [0, 1, 2, 3]
    for e in errors.values():
        assert "infer rank 3 buffer" in str(e) and repr(name) in str(e) and \
            "is on cpu but this communicator moves CUDA memory" in str(e), str(e)
    assert all(bool((t.view(torch.uint8) == SENT).all())
               for t in (v.t for v in dst[0].params.values()))


@needs_fake_nccl
def test_delta_refits_over_nccl(tmp_path):
    """delta=True over transport "nccl" (snapshots and relay scratch in device memory,
    the device encode/apply kernels; here their CPU emulation on the fake device): three
    refits with about 1/64 of the bf16 words flipped before each; after the last every
    destination element equals the oracle and every worker is committed at version 3;
    refits 2 and 3 put under a tenth of the dense bytes on the wire."""
    from reshard.integrations import ReshardTrainer
    from test_integrations import FlippedWeights, flip
    path, sources, expect, models = dense_case(tmp_path, "tp=2", "tp=1,dp=2")
    src, dst = cuda_models(sources, models)
    workers = [WorkerCore(m, parallel("tp=1,dp=2", i), CUDA) for i, m in enumerate(dst)]
    wire = {}

    class UpdateThenSend(ReshardTrainer):
        def send_weights(self):
            for v in self.source.named()[0].values():
                flip(v.t, self.version + 1)
            super().send_weights()
            d = self.plan.delta_info()
            wire[(self.version, self.rank)] = (d["wire_bytes"], d["stream_bytes"])
    errors = refit_threads(tmp_path, path, "tp=2", "tp=1,dp=2", src, workers, steps=3,
                           trainer_cls=UpdateThenSend, transport="nccl", delta=True)
    assert errors == {}
    oracle = FlippedWeights(conventions.Weights(conventions.load_config(path)), 3)
    for i, m in enumerate(models):
        want = conventions.vllm_state_dict(oracle, "tp=1,dp=2", i, SENT)
        live = dict(m.named_parameters())
        for n, x in want.items():
            assert conventions.mismatches(live[n].detach(), x) == 0, (i, n)
    assert [(w.weights_state()["state"], w.weights_state()["version"]) for w in workers] == \
        [("committed", 3)] * 2
    for k in (2, 3):
        sent = sum(wire[(k, r)][0] for r in (0, 1))
        dense = sum(wire[(k, r)][1] for r in (0, 1))
        assert 0 < sent < dense / 10, (k, sent, dense)
