#!/usr/bin/env bash
# Prints GOFLAGS for the Makefile: the caller's own, plus -tags=mujoco where MuJoCo's headers are
# installed (the MuJoCo envs are then built in; see scripts/setup-mujoco.sh), plus the tags given
# as arguments (`goflags.sh mpi` gives -tags=mujoco,mpi). Run at each command, so that a
# `make setup` that installs MuJoCo takes effect in the same make. A caller's own -tags wins.
flags="${GOFLAGS:-}"
tags=()
if [[ -f /usr/include/mujoco/mujoco.h ]]; then
	tags+=(mujoco)
fi
tags+=("$@")
if [[ $flags != *-tags* && ${#tags[@]} -gt 0 ]]; then
	flags="${flags:+$flags }-tags=$(IFS=,; echo "${tags[*]}")"
fi
echo "$flags"
