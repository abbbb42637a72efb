"""A stand-in for the parts of verl that reshard's verl shell touches, nothing more.

Revision followed: dongha-yoon/verl @ d6f2c522870e8194efd102b34cb02ffbcff30c02
(the newest stored revision of verl/checkpoint_engine/base.py: CheckpointEngine with
``wire_format`` "named_tensors" / "rank_local_named_tensors" / "delta_flush",
``is_master_rank``, the abstract prepare / build_topology / init_process_group /
finalize / send_weights / receive_weights; engine_workers.py's actor-side engine
construction and update_weights; nccl_m2n_checkpoint_engine.py, the rank-local engine
beside it), checked against verl-project/verl @ 1dda039b9c6311889a9c9a26040677e1254814f9
(main, 2026-08-22: the same abstract methods and signatures; its registry also records
import errors). Written from the facts of those files (names, signatures, call order),
not copied; no Ray: ``_manager.py`` runs CheckpointEngineManager.update_weights's
sequence over a torch.distributed store between separately started processes.
Tests put tests/python/standin first on sys.path to use it."""

REVISION = ("dongha-yoon/verl", "d6f2c522870e8194efd102b34cb02ffbcff30c02")
MAIN_CHECKED = ("verl-project/verl", "1dda039b9c6311889a9c9a26040677e1254814f9")
