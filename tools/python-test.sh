#!/usr/bin/env bash
# Test the Python package against a build's libreshard.so: install Debian's python3
# packages when missing, run pytest in one process, the MPI tests under mpirun, and
# the refit example. usage: tools/python-test.sh [build-dir (default build)]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tools/apt-install.sh --group python
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export RESHARD_LIBRARY="$PWD/$build/libreshard.so" PYTHONPATH="$PWD/python"
py=(/usr/bin/python3 -m pytest -q -p no:cacheprovider --color=no -rsx)
echo "== pytest tests/python (one process)"
timeout 600 "${py[@]}" tests/python
echo "== pytest tests/python/test_mpi.py (mpirun -np 4)"
timeout 600 mpirun -np 4 "${py[@]}" tests/python/test_mpi.py
echo "== tests/python/mpi_grow.py (mpirun -np 3, spawns a 4th process that joins)"
grow=$(timeout 120 mpirun -np 3 /usr/bin/python3 tests/python/mpi_grow.py)
echo "$grow"
grep -q "GROW OK" <<<"$grow"
echo "== examples/python/refit.py (mpirun -np 4)"
timeout 600 mpirun -np 4 /usr/bin/python3 examples/python/refit.py --model qwen3-0.6b --layers 1 \
  --train tp=2 --infer tp=1,dp=2
echo "== the installed package (cmake --install into a temporary prefix, imported from elsewhere)"
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
site=$(dirname "$(dirname "$(find "$prefix" -path '*/reshard/__init__.py' | head -1)")")
(cd "$prefix" && env -u RESHARD_LIBRARY -u PYTHONPATH PYTHONPATH="$site" /usr/bin/python3 -c '
import reshard
refit = reshard.Model("qwen3-0.6b", layers=1).refit("tp=2", "tp=1")
assert reshard.library_path.startswith("'"$prefix"'"), reshard.library_path
print("installed:", reshard.library_path, "-", len(refit.train.parameters(0)), "parameters on train rank 0")
import importlib.metadata as md
eps = [e.value for e in md.entry_points(group="vllm.general_plugins") if e.name == "reshard"]
assert eps == ["reshard.integrations.vllm:plugin"], eps
print("vLLM plugin entry point:", eps[0])
')
