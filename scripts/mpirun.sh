#!/usr/bin/env bash
# mpirun with the flags a DD-PPO job of towerrl needs on one machine, as root or as a user:
#   --bind-to none       Open MPI otherwise pins each of 2 ranks to one core (GOMAXPROCS=1)
#   --oversubscribe      more ranks than cores (4 ranks on a 2-core machine)
#   --allow-run-as-root  added only when run as root (Open MPI refuses root otherwise)
# Every argument is passed on: scripts/mpirun.sh -np 4 bin/train --algo ddppo ...
# On a cluster, call mpirun or srun yourself (docs/distributed.md).
set -euo pipefail
if ! command -v mpirun >/dev/null; then
	echo "mpirun.sh: mpirun not found: apt-get install openmpi-bin libopenmpi-dev" >&2
	exit 1
fi
args=(--bind-to none --oversubscribe)
if [[ $(id -u) == 0 ]]; then
	args+=(--allow-run-as-root)
fi
exec mpirun "${args[@]}" "$@"
