#!/bin/sh
# Run one MPI rank as if it were on host h<k>: k = (its rank mod the train world) * HOSTS /
# the train world, so training rank i and inference rank i land on the same fake host
# and HOSTS hosts split the ranks of each side in contiguous blocks.
#   mpirun -np N sh fake_hosts.sh HOSTS TRAIN_WORLD command [args...]
hosts=$1 train=$2
shift 2
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}
RESHARD_HOST=h$(( (r % train) * hosts / train ))
export RESHARD_HOST
exec "$@"
