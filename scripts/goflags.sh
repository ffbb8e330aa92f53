#!/usr/bin/env bash
# Prints GOFLAGS for the Makefile: the caller's own, plus -tags=mujoco where MuJoCo's headers are
# installed (the MuJoCo envs are then built in; see scripts/setup-mujoco.sh). Run at each
# command, so that a `make setup` that installs MuJoCo takes effect in the same make.
flags="${GOFLAGS:-}"
if [[ -f /usr/include/mujoco/mujoco.h && $flags != *-tags* ]]; then
	flags="${flags:+$flags }-tags=mujoco"
fi
echo "$flags"
