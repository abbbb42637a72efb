#!/bin/sh
# pid_namespaces.sh MPIRUN NP PROGRAM ARGS...: run PROGRAM's ranks each in its own PID
# namespace (unshare --pid --fork --mount-proc: one container per rank), over TCP
# (Open MPI's shared-memory single copy reads peers by pid too). Exit 77 (skipped)
# where this machine cannot make PID namespaces (needs root or user namespaces).
if ! command -v unshare >/dev/null 2>&1 ||
   ! timeout 10 unshare --pid --fork --mount-proc true >/dev/null 2>&1; then
    echo "SKIP: unshare --pid --fork --mount-proc does not work here (root needed)"
    exit 77
fi
mpirun=$1
np=$2
shift 2
exec "$mpirun" --oversubscribe --mca btl self,tcp -np "$np" \
    unshare --pid --fork --mount-proc "$@"
