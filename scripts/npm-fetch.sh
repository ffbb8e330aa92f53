# Sourced by scripts/setup-ort.sh and scripts/setup-cuda-ep.sh: fetch files out of an npm
# package into the per-user cache, each checked against its sha256 and installed atomically
# (temporary name, then rename), so concurrent runs from two clones are safe. Idempotent: nothing
# is downloaded when every file is already there with the right checksum.

say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }
checksum() { sha256sum "$1" | cut -d' ' -f1; }

# npm_fetch PACKAGE SIZE_NOTE DEST_DIR HINT MEMBER SHA256 [MEMBER SHA256 ...]
# installs each package member under DEST_DIR by its base name. HINT is said when npm is
# missing or the platform is not Linux x86_64.
npm_fetch() {
	local package="$1" size="$2" dest_dir="$3" hint="$4"
	shift 4
	local -a members=() sums=()
	while (($#)); do
		members+=("$1")
		sums+=("$2")
		shift 2
	done
	local missing=0 i
	for i in "${!members[@]}"; do
		local dest="${dest_dir}/$(basename "${members[$i]}")"
		if [[ ! -f "$dest" ]]; then
			missing=1
		elif [[ "$(checksum "$dest")" != "${sums[$i]}" ]]; then
			say "checksum mismatch for $dest; fetching it again"
			missing=1
		fi
	done
	if ((!missing)); then
		say "present: ${dest_dir}/$(basename "${members[0]}")"
		return 0
	fi

	case "$(uname -s)-$(uname -m)" in
	Linux-x86_64) ;;
	*) die "only Linux x86_64 is packaged here (this is $(uname -s)-$(uname -m)); $hint" ;;
	esac
	command -v npm >/dev/null 2>&1 || die "npm is not installed; install Node.js and npm (Debian: apt-get install npm), or $hint"
	command -v sha256sum >/dev/null 2>&1 || die "sha256sum is missing (Debian package coreutils)"

	mkdir -p "$dest_dir"
	local work
	work="$(mktemp -d "${dest_dir%/*}/.fetch.XXXXXX")"
	# shellcheck disable=SC2064 # expand now: work is local
	trap "rm -rf '$work'" EXIT

	say "fetching ${package} from the npm registry (${size}, once per machine)"
	if ! (cd "$work" && npm pack --loglevel=error "$package" >npm.out 2>npm.err); then
		cat "$work/npm.err" >&2 || true
		die "npm pack ${package} failed: is the npm registry reachable? (see npm's message above)"
	fi
	local tarball
	tarball="$work/$(tail -n 1 "$work/npm.out")"
	[[ -f "$tarball" ]] || die "npm pack did not produce a tarball (it printed: $(cat "$work/npm.out"))"

	tar --no-same-owner -xzf "$tarball" -C "$work" "${members[@]}" || die "$tarball does not contain ${members[*]}"
	for i in "${!members[@]}"; do
		local got
		got="$(checksum "$work/${members[$i]}")"
		[[ "$got" == "${sums[$i]}" ]] || die "sha256 of ${members[$i]} is $got, expected ${sums[$i]}; refusing to install it"
	done
	for i in "${!members[@]}"; do
		local dest="${dest_dir}/$(basename "${members[$i]}")"
		chmod 0755 "$work/${members[$i]}"
		mv -f "$work/${members[$i]}" "$dest.tmp.$$"
		mv -f "$dest.tmp.$$" "$dest"
		say "installed $dest"
	done
}
