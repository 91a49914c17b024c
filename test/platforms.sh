#!/bin/bash
#
# test/platforms.sh
#
# The suites on the Debian releases after this machine's, with Debian's
# own packages:  bash test/platforms.sh [RELEASE...]
#
#   trixie  (Debian 13)       PostgreSQL 17, hiredis 1.2, Redis 8.0
#   forky   (Debian testing)  PostgreSQL 18, hiredis 1.2, Redis 8.0 and
#                             Valkey 9
#
# For each release (both by default, their roots made at the same time)
# it makes a root with debootstrap --variant=minbase from the mirror this
# machine's apt sources name, installs the packages with apt (no service
# starts: policy-rc.d), copies
# the checkout in and runs test/check.sh there, once per server, as root:
# check.sh runs PostgreSQL and the suites as the postgres user.  Each
# command runs in a mount namespace of its own whose root is the root
# (pivot_root, not chroot: the kernel lets no chrooted process make the
# user namespaces 013_blackhole makes), with /proc, /sys and a /dev/shm
# mounted there; they vanish with the command.  What runs is RL_PLATFORM_ONLY
# (an RL_ONLY list), by default the pg_regress suites, both passes, and
# the TAP suites of connection handling, scripts, faults, the local
# engine, upgrades and triggers (test/README.md).  Every root is
# unmounted and removed on exit, whatever happened.
#
# It prints each run's suite lines, one line per run, and last
# "N passed, N failed" summed over the runs; the exit status is non-zero
# if anything failed.  It needs root and the debootstrap package.
#
# RL_ROOTS_DIR          where the roots are made (default /var/tmp)
# RL_PLATFORM_ONLY      the suites to run in the roots (an RL_ONLY list)
# RL_PLATFORM_ROOT      an existing root to use for the one release named,
#                       kept afterwards (developing: skips debootstrap)

set -u

RL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$RL_ROOT/test/lib/debian.sh"

RL_ROOTS_DIR=${RL_ROOTS_DIR:-/var/tmp}
RL_PLATFORM_ROOT=${RL_PLATFORM_ROOT:-}
RL_PLATFORM_ONLY=${RL_PLATFORM_ONLY:-$RL_PLATFORM_SUITES}

RL_ROOTS=()		# roots made here, removed on exit
RL_RUNS=()		# "name passed failed", one per run
# Safety nets: making both roots takes about 2 minutes, one run of the
# suites about 6.
RL_SETUP_TIMEOUT=900
RL_RUN_TIMEOUT=1200

# The PostgreSQL and the servers each release is tested with.
rl_platform_pg() {
	case $1 in
		trixie) echo 17 ;;
		forky) echo 18 ;;
		*) return 1 ;;
	esac
}
rl_platform_servers() {
	case $1 in
		trixie) echo redis ;;
		forky) echo redis valkey ;;
	esac
}

rl_note() {
	echo "== $*"
}

# Unmounts whatever is mounted under ROOT, deepest first (nothing is,
# unless a command's namespace outlived it).
rl_root_unmount() {
	local root=$1 m
	for m in $(awk -v r="$root/" 'index($2 "/", r) == 1 { print $2 }' /proc/mounts | sort -r); do
		umount "$m" 2>/dev/null || umount -l "$m"
	done
}

# Stops whatever still runs in ROOT (the servers check.sh started are
# stopped by its own trap; this is for a run killed by its timeout), then
# unmounts and removes it.  A root that is still mounted is not removed.
rl_root_remove() {
	local root=$1 pid want
	case $root in
		"$RL_ROOTS_DIR"/rl-root-*) ;;
		*)
			echo "not a root made here: \"$root\"" >&2
			return 1
			;;
	esac
	# A process whose root directory is the root's (the same inode, also
	# through the bind mount of its namespace).
	want=$(stat -c %d:%i "$root") || return 1
	for pid in $(ls /proc | grep -E '^[0-9]+$'); do
		[ "$(stat -L -c %d:%i "/proc/$pid/root" 2>/dev/null)" = "$want" ] &&
			kill -9 "$pid" 2>/dev/null
	done
	sleep 0.5
	rl_root_unmount "$root"
	if awk -v r="$root/" 'index($2 "/", r) == 1 { found = 1 } END { exit !found }' /proc/mounts; then
		echo "$root is still mounted; not removed" >&2
		return 1
	fi
	rm -rf --one-file-system "$root"
}

# Stops the process PID and every process under it.
rl_kill_tree() {
	local child
	for child in $(ps -o pid= --ppid "$1"); do
		rl_kill_tree "$child"
	done
	kill "$1" 2>/dev/null
}

rl_cleanup() {
	local root pid
	# Roots still being made: their debootstrap or apt first.
	for pid in $(jobs -p); do
		rl_kill_tree "$pid"
	done
	for root in "${RL_ROOTS[@]}"; do
		[ -d "$root" ] && rl_root_remove "$root"
		rm -f "$root.make.log" "$root.make.rc" "$root.debootstrap.log"
	done
	RL_ROOTS=()
}
trap rl_cleanup EXIT
trap 'exit 130' INT TERM

# rl_in ROOT COMMAND...: COMMAND with ROOT as the root of a mount
# namespace of its own, /proc, /sys and /dev/shm mounted, and a clean
# environment.
rl_in() {
	local root=$1
	shift
	unshare --mount --propagation private --fork -- /bin/sh -c '
		root=$1
		shift
		mount --rbind "$root" "$root" &&
			mount -t proc proc "$root/proc" &&
			mount -t sysfs sysfs "$root/sys" &&
			mount -t tmpfs -o mode=1777 tmpfs "$root/dev/shm" &&
			cd "$root" && mkdir -p .rl-host && pivot_root . .rl-host &&
			cd / && umount -l /.rl-host && rmdir /.rl-host || exit 1
		exec /usr/bin/env -i \
			PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"' sh "$root" "$@"
}

# rl_root_make RELEASE ROOT: debootstrap, mounts, packages.
rl_root_make() {
	local release=$1 root=$2 pg mirror script packages
	pg=$(rl_platform_pg "$release")
	if [ ! -x "$root/usr/bin/apt-get" ]; then
		mirror=$(rl_debian_mirror) || return 1
		# An older debootstrap knows testing by its sid script.
		script=/usr/share/debootstrap/scripts/$release
		[ -e "$script" ] || script=/usr/share/debootstrap/scripts/sid
		rl_note "$release: debootstrap from $mirror"
		timeout "$RL_SETUP_TIMEOUT" debootstrap --variant=minbase "$release" "$root" \
			"$mirror" "$script" >"$root.debootstrap.log" 2>&1 || {
			tail -n 20 "$root.debootstrap.log" >&2
			rm -f "$root.debootstrap.log"
			return 1
		}
		rm -f "$root.debootstrap.log"
	fi
	# No package may start its service: the suites start their own.
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 755 "$root/usr/sbin/policy-rc.d"
	cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null
	packages="postgresql-$pg postgresql-server-dev-$pg libhiredis-dev libssl-dev openssl
		libipc-run-perl make gcc perl strace iproute2 procps pgbouncer"
	for s in $(rl_platform_servers "$release"); do
		packages="$packages $s-server $s-tools"
	done
	rl_note "$release: apt-get install" $packages
	{
		# A mirror that is a snapshot serves testing's Release past its
		# Valid-Until (a week): the packages are no less Debian's.
		rl_in "$root" timeout "$RL_SETUP_TIMEOUT" apt-get \
			-o Acquire::Check-Valid-Until=false update -qq &&
			rl_in "$root" timeout "$RL_SETUP_TIMEOUT" apt-get install -y -qq \
				--no-install-recommends $packages
	} >"$root/apt.log" 2>&1 || {
		tail -n 20 "$root/apt.log" >&2
		return 1
	}
}

# The checkout's files as git knows them (committed or not, new ones
# too), else everything but .git and build products.
rl_copy_checkout() {
	local dest=$1
	mkdir -p "$dest"
	if git -C "$RL_ROOT" rev-parse --git-dir >/dev/null 2>&1; then
		(cd "$RL_ROOT" && git ls-files -z --cached --others --exclude-standard |
			xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
			tar --null -T - -cf -) | tar -C "$dest" -xf -
	else
		(cd "$RL_ROOT" && tar --exclude=.git --exclude='*.o' --exclude='*.so' -cf - .) |
			tar -C "$dest" -xf -
	fi
}

# rl_run RELEASE ROOT SERVER: check.sh in the root; one RL_RUNS line.
rl_run() {
	local release=$1 root=$2 server=$3 pg name log line passed failed version
	pg=$(rl_platform_pg "$release")
	version=$(rl_in "$root" "$server-server" --version | sed -n 's/.* v=\([^ ]*\).*/\1/p')
	name="$release-pg$pg-$server-$version"
	log=$root/check-$server.log
	rl_note "$name: RL_ONLY=\"$RL_PLATFORM_ONLY\""
	rm -rf "$root/opt/ratelimit"
	rl_copy_checkout "$root/opt/ratelimit"
	chmod -R a+rX "$root/opt/ratelimit"
	rl_in "$root" timeout -k 10 "$RL_RUN_TIMEOUT" env RL_SERVER="$server" \
		RL_ONLY="$RL_PLATFORM_ONLY" RL_SOAK_SECONDS="${RL_SOAK_SECONDS:-30}" \
		bash /opt/ratelimit/test/check.sh >"$log" 2>&1
	# The suite lines and the summary; all of it when something failed.
	line=$(tail -n 1 "$log")
	if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
		passed=${BASH_REMATCH[1]}
		failed=${BASH_REMATCH[2]}
	else
		passed=0
		failed=1
	fi
	if [ "$failed" = 0 ]; then
		sed -n '/^== summary/,/^== closing summary/p' "$log" | sed '$d'
	else
		cat "$log"
	fi
	RL_RUNS+=("$name $passed $failed")
}

main() {
	local releases=("$@") release root server t0
	[ ${#releases[@]} -gt 0 ] || releases=(trixie forky)
	if [ "$(id -u)" != 0 ]; then
		echo "test/platforms.sh makes Debian roots: run it as root" >&2
		echo "0 passed, 1 failed"
		exit 1
	fi
	command -v debootstrap >/dev/null || {
		echo "debootstrap is not installed (apt-get install debootstrap)" >&2
		echo "0 passed, 1 failed"
		exit 1
	}
	if [ -n "$RL_PLATFORM_ROOT" ] && [ ${#releases[@]} != 1 ]; then
		echo "RL_PLATFORM_ROOT is the root of one release: name it" >&2
		exit 1
	fi
	# Every root is made first, all at once: debootstrap and apt wait on
	# the mirror and the disk far more than on the CPU, and no suite runs
	# meanwhile (the suites' timings must not share the machine).
	local made=() roots=()
	t0=$SECONDS
	for release in "${releases[@]}"; do
		if ! rl_platform_pg "$release" >/dev/null; then
			echo "unknown release $release (trixie, forky)" >&2
			RL_RUNS+=("$release 0 1")
			continue
		fi
		if [ -n "$RL_PLATFORM_ROOT" ]; then
			root=$(realpath "$RL_PLATFORM_ROOT")
			mkdir -p "$root"
		else
			root=$(mktemp -d "$RL_ROOTS_DIR/rl-root-$release.XXXXXX") || exit 1
			RL_ROOTS+=("$root")
			# It becomes "/": postgres must enter it (mktemp made it 700).
			chmod 755 "$root"
		fi
		(
			rl_root_make "$release" "$root" >"$root.make.log" 2>&1
			echo "$? $((SECONDS - t0))" >"$root.make.rc"
		) &
		made+=("$release")
		roots+=("$root")
	done
	wait
	local i rc secs
	for i in "${!made[@]}"; do
		release=${made[$i]}
		root=${roots[$i]}
		cat "$root.make.log"
		read -r rc secs <"$root.make.rc" || rc=1
		rm -f "$root.make.log" "$root.make.rc"
		if [ "$rc" != 0 ]; then
			echo "$release: the root could not be made" >&2
			RL_RUNS+=("$release-setup 0 1")
		else
			rl_note "$release: ready in $secs s"
			for server in $(rl_platform_servers "$release"); do
				t0=$SECONDS
				rl_run "$release" "$root" "$server"
				rl_note "$release $server: $((SECONDS - t0)) s"
			done
		fi
		if [ -n "$RL_PLATFORM_ROOT" ]; then
			rl_root_unmount "$root"
		else
			rl_root_remove "$root"
		fi
	done

	local s name passed failed total_passed=0 total_failed=0
	rl_note "platforms"
	for s in "${RL_RUNS[@]}"; do
		read -r name passed failed <<<"$s"
		printf '%-36s %6d passed %6d failed\n' "$name" "$passed" "$failed"
		total_passed=$((total_passed + passed))
		total_failed=$((total_failed + failed))
	done
	echo "$total_passed passed, $total_failed failed"
	[ "$total_failed" = 0 ]
}

main "$@"
