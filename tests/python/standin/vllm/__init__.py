"""A stand-in for the parts of vLLM that reshard's vLLM shell touches, nothing more.

Revision followed: new-TonyWang/vllm @ 142e770e57b802c8e2668e989c538aabb668b8c5,
vllm/distributed/weight_transfer/base.py (the newest stored revision: WeightSource
with held_names()/groups()/iter_groups(), WeightTransferUpdatePayload = dict | list of
dicts, WeightTransferEngine.defers_processing / drain_pending, a trainer engine that
takes no config, VLLMWeightSyncClient.finish_weight_update(weight_version=None)).
The worker-side failure path (abort_weight_update, then reset_weight_update_target,
then the session dropped; _require_resident_weights refusing updates while weights
sleep) is modelled from /work/shared/FRAMEWORKS.md's December 2026 audit in
``vllm/_engine.py``. It is not vLLM: no model, no config classes, no GPU. Written
from the facts of those files (names, signatures, call order), not copied.
Tests put tests/python/standin first on sys.path to use it."""

REVISION = ("new-TonyWang/vllm", "142e770e57b802c8e2668e989c538aabb668b8c5")
