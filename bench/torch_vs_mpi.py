"""The same refit over MPI (Comm.from_mpi) and over a torch.distributed gloo group
(Comm.from_torch), side by side: 4 processes, qwen3-0.6b with 2 layers (the real
shapes), Megatron tp=2 -> vLLM tp=1,dp=2 (every byte of both replicas verified after
each timed execution, outside the timing). Prints one row per transport: the median
refit time over the iterations (the slowest rank's median), and the bytes verified.

    /usr/bin/python3 bench/torch_vs_mpi.py [--iters 5]

Runs `mpirun -np 4` itself for the MPI row (as root with --allow-run-as-root, and
--oversubscribe); the package is taken from this tree's python/ and build/ unless
PYTHONPATH / RESHARD_LIBRARY say otherwise."""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "..", "tests", "python", "torch_worker.py")
WORLD = 4


def mpi_rank():
    """One rank of the MPI row (under mpirun): torch_worker's bench case on MPI."""
    sys.path.insert(0, os.path.dirname(WORKER))
    from mpi4py import MPI
    import reshard
    import torch_worker
    comm = reshard.Comm.from_mpi(MPI.COMM_WORLD)
    verified, secs = torch_worker.case_bench(comm, tempfile.gettempdir())
    every = MPI.COMM_WORLD.gather((verified, secs))
    comm.close()
    if MPI.COMM_WORLD.rank == 0:
        print(json.dumps({"verified": sum(v for v, _ in every),
                          "seconds": max(s for _, s in every)}), flush=True)


def run_mpi(env):
    root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
    out = subprocess.run(["mpirun", *root, "--oversubscribe", "-np", str(WORLD), sys.executable,
                          __file__, "--mpi-rank"],
                         env=env, capture_output=True, text=True, timeout=600)
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not rows:
        sys.exit("mpi row failed:\n%s\n%s" % (out.stdout, out.stderr[-3000:]))
    return rows[0]


def run_gloo(env):
    with tempfile.TemporaryDirectory() as d:
        procs = [subprocess.Popen([sys.executable, WORKER, "bench", str(r), str(WORLD),
                                   os.path.join(d, "store"), d],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for r in range(WORLD)]
        reps = []
        for p in procs:
            out, err = p.communicate(timeout=600)
            reps += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        if len(reps) != WORLD or not all(r["ok"] for r in reps):
            sys.exit("gloo row failed: %s\n%s" % (reps, err[-3000:]))
    return {"verified": sum(r["verified"] for r in reps),
            "seconds": max(r["seconds"] for r in reps)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--mpi-rank", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.mpi_rank:
        return mpi_rank()
    env = dict(os.environ, ITERS=str(a.iters))
    tree = os.path.dirname(HERE)  # this tree's package and library unless told otherwise
    env.setdefault("PYTHONPATH", os.path.join(tree, "python"))
    env.setdefault("RESHARD_LIBRARY", os.path.join(tree, "build", "libreshard.so"))
    rows = [("mpi", run_mpi(env)), ("torch-gloo", run_gloo(env))]
    print("qwen3-0.6b, 2 layers, tp=2 -> tp=1,dp=2, %d ranks, median of %d refits"
          % (WORLD, a.iters))
    print("%-12s %12s %16s" % ("transport", "refit_s", "verified_bytes"))
    for name, r in rows:
        print("%-12s %12.4f %16d" % (name, r["seconds"], r["verified"]))
    print("gloo / mpi: %.2fx" % (rows[1][1]["seconds"] / rows[0][1]["seconds"]))


if __name__ == "__main__":
    main()
