#!/usr/bin/env bash
# MuJoCo 2.2.2 for the MuJoCo envs (envs/mujoco, Gymnasium's v4 ids): Debian's libmujoco-dev.
# Installs it when it is missing and this can (root, apt-get); otherwise prints the command and
# goes on: everything else builds and runs without it (the MuJoCo envs are then absent, and
# --env HalfCheetah-v4 says how to get them). Idempotent.
set -euo pipefail
header=/usr/include/mujoco/mujoco.h
if [[ -f $header ]]; then
	exit 0
fi
if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
	echo "setup: installing MuJoCo 2.2.2 (apt-get install libmujoco-dev) for the MuJoCo envs" >&2
	if { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libmujoco-dev >/dev/null; }; then
		exit 0
	fi
	echo "setup: apt-get could not install libmujoco-dev; the MuJoCo envs stay absent" >&2
	exit 0
fi
echo "setup: MuJoCo is not installed, so the MuJoCo envs (HalfCheetah-v4, ...) are absent;" \
	"to get them: sudo apt-get install libmujoco-dev (Debian 12 / Ubuntu 24.04), then make again" >&2
