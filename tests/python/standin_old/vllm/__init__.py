"""A stand-in for the parts of vLLM that reshard's vLLM shell touches, nothing more:
vllm.distributed.weight_transfer.base (the engine base classes) and .factory (the
registries), with the names, signatures and call sequence of vLLM's files (base.py
aa1cd966 and its later stored revision with the trainer engine, factory.py 20a3d5e2;
see docs/vllm.md). It is not vLLM: no model, no config classes, no GPU. Tests put
tests/python/standin first on sys.path to use it."""
