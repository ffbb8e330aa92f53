#!/usr/bin/env bash
# MuJoCo 2.2.2 for the MuJoCo envs (envs/mujoco, Gymnasium's v4 ids): Debian's libmujoco-dev;
# and for drawing their episodes offscreen (eval --gif, train --gif-every), EGL and Mesa's
# software OpenGL: libegl1, libegl-mesa0, libgl1-mesa-dri. Installs what is missing when this
# can (root, apt-get); otherwise prints the command and goes on: everything else builds and runs
# without them (the MuJoCo envs are then absent, and --env HalfCheetah-v4 says how to get them;
# without EGL, --gif on a MuJoCo env says what to install). Idempotent.
set -euo pipefail
header=/usr/include/mujoco/mujoco.h
render=(libegl1 libegl-mesa0 libgl1-mesa-dri)
# renders: libEGL.so.1, Mesa's EGL vendor (libegl-mesa0: libEGL.so.1 alone is glvnd's dispatcher,
# which finds no display without it) and Mesa's software driver (llvmpipe) are installed.
renders() {
	/sbin/ldconfig -p 2>/dev/null | grep -q 'libEGL\.so\.1 ' &&
		compgen -G '/usr/share/glvnd/egl_vendor.d/*mesa*.json' >/dev/null &&
		compgen -G '/usr/lib/*/dri/swrast_dri.so' >/dev/null
}
pkgs=()
[[ -f $header ]] || pkgs+=(libmujoco-dev)
renders || pkgs+=("${render[@]}")
if ((${#pkgs[@]} == 0)); then
	exit 0
fi
if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
	echo "setup: installing ${pkgs[*]} for the MuJoCo envs and their offscreen rendering (apt-get install)" >&2
	if { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null; }; then
		exit 0
	fi
	echo "setup: apt-get could not install ${pkgs[*]}; the MuJoCo envs (or their GIFs) stay absent" >&2
	exit 0
fi
if [[ ! -f $header ]]; then
	echo "setup: MuJoCo is not installed, so the MuJoCo envs (HalfCheetah-v4, ...) are absent;" \
		"to get them: sudo apt-get install libmujoco-dev (Debian 12 / Ubuntu 24.04), then make again" >&2
fi
if ! renders; then
	echo "setup: EGL or Mesa's software OpenGL is missing, so MuJoCo episodes cannot be drawn (eval --gif);" \
		"to draw them: sudo apt-get install ${render[*]}" >&2
fi
