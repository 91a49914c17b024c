#!/bin/bash
#
# test/lib/servers.sh
#
# Throwaway servers for the demo, the tests and the benchmark: installs
# what a fresh Debian machine lacks, builds and installs the extension,
# and starts a Redis and a PostgreSQL on loopback in a temporary directory.
# PostgreSQL refuses to run as root, so when we are root the servers and
# the clients that need a cluster run as the postgres user.
#
# The PostgreSQL is the one the Debian release ships (12: 15, 13: 17,
# testing: 18), or RL_PG_VERSION; the server is Redis, or Valkey with
# RL_SERVER=valkey (valkey-server, valkey-cli: $RL_SERVER_BIN, $RL_CLI).
# RL_PGBIN names another installation's bin directory (test/bench/ab.sh
# runs one build from a relocated copy of the system's PostgreSQL).
#
# Source it, then:
#   rl_setup                         install packages, build, install
#   rl_free_port BASE                a free loopback port from BASE on
#   rl_start_redis NAME PORT [ARGS]  redis-server (or valkey-server) on
#                                    127.0.0.1:PORT
#   rl_start_pg NAME PORT REDISPORT  initdb + pg_ctl start, extension created
#   rl_psql NAME [psql args]         psql to that cluster, as its owner
#   rl_stop_all                      stop everything started (also on exit)
#
# Everything lives under $RL_TMP (made on first use, removed at exit unless
# RL_KEEP=1).

RL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# The release's own PostgreSQL; on another system the newest installed.
rl_default_pg_version() {
	case $( (. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")) in
		bookworm) echo 15 ;;
		trixie) echo 17 ;;
		forky) echo 18 ;;
		*) (ls -d /usr/lib/postgresql/*/lib/pgxs 2>/dev/null || echo /15/) |
			awk -F/ '{ print $(NF - 2) }' | sort -n | tail -n 1 ;;
	esac
}

RL_PG_VERSION=${RL_PG_VERSION:-$(rl_default_pg_version)}
RL_SERVER=${RL_SERVER:-redis}
case $RL_SERVER in
	redis | valkey) ;;
	*)
		echo "RL_SERVER is \"$RL_SERVER\": redis or valkey" >&2
		exit 1
		;;
esac
RL_SERVER_BIN=$RL_SERVER-server
RL_CLI=$RL_SERVER-cli
RL_PGBIN=${RL_PGBIN:-/usr/lib/postgresql/$RL_PG_VERSION/bin}
RL_PG_CONFIG=$RL_PGBIN/pg_config
RL_PACKAGES="postgresql-$RL_PG_VERSION postgresql-server-dev-$RL_PG_VERSION libhiredis-dev
	libssl-dev openssl $RL_SERVER-server libipc-run-perl make gcc pgbouncer"
# Installed when root; without them the suites that need them skip.
RL_OPTIONAL_PACKAGES="strace"
RL_PIDS_REDIS=()
RL_PGDATAS=()

# Run a command as the cluster owner (postgres when we are root).  The
# owner may not be able to enter the directory we are in (a clone under
# /root, mode 700), so the command runs from / then; every path handed to
# it is absolute.
rl_as_owner() {
	if [ "$(id -u)" = 0 ]; then
		(cd / && runuser -u postgres -- "$@")
	else
		"$@"
	fi
}

# Make $RL_TMP once, in the calling shell (never from a subshell).
rl_tmp_init() {
	if [ -z "${RL_TMP:-}" ]; then
		RL_TMP=$(mktemp -d /tmp/ratelimit.XXXXXX)
		chmod 755 "$RL_TMP"
		[ "$(id -u)" = 0 ] && chown postgres: "$RL_TMP"
		trap rl_stop_all EXIT
	fi
	return 0
}

# True if nothing listens on 127.0.0.1:PORT.
rl_port_free() {
	! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# rl_free_port BASE: the first port from BASE on (100 tried) that nothing
# listens on, so the servers can run beside a user's own.
rl_free_port() {
	local port
	for port in $(seq "$1" $(($1 + 99))); do
		if rl_port_free "$port"; then
			echo "$port"
			return 0
		fi
	done
	echo "no free port in $1-$(($1 + 99))" >&2
	return 1
}

# Install missing packages (as root), then build and install the extension.
rl_setup() {
	local missing=()
	for p in $RL_PACKAGES; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	if [ "$(id -u)" = 0 ]; then
		for p in $RL_OPTIONAL_PACKAGES; do
			dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
		done
	fi
	if [ ${#missing[@]} -gt 0 ]; then
		if [ "$(id -u)" != 0 ]; then
			echo "missing packages: ${missing[*]}; run as root (or with sudo)" >&2
			return 1
		fi
		echo "installing ${missing[*]}"
		apt-get update -qq >/dev/null &&
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
			return 1
	fi
	# A redis-server or postgresql service the packages started is not ours.
	make -C "$RL_ROOT" -s with_llvm=no PG_CONFIG="$RL_PG_CONFIG" >/dev/null &&
		make -C "$RL_ROOT" -s with_llvm=no PG_CONFIG="$RL_PG_CONFIG" install >/dev/null
}

rl_start_redis() {
	local name=$1 port=$2
	shift 2
	rl_tmp_init
	local dir=$RL_TMP/redis-$name
	mkdir -p "$dir"
	[ "$(id -u)" = 0 ] && chown postgres: "$dir"
	rl_as_owner "$RL_SERVER_BIN" --port "$port" --bind 127.0.0.1 --save '' \
		--appendonly no --daemonize yes --dir "$dir" \
		--pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
		--enable-debug-command local "$@" || return 1
	for _ in $(seq 50); do
		"$RL_CLI" -p "$port" PING >/dev/null 2>&1 && break
		sleep 0.1
	done
	RL_PIDS_REDIS+=("$dir/redis.pid")
}

rl_stop_redis() {
	local name=$1 pid
	local dir=$RL_TMP/redis-$name
	[ -f "$dir/redis.pid" ] || return 0
	pid=$(cat "$dir/redis.pid")
	kill -CONT "$pid" 2>/dev/null
	kill "$pid" 2>/dev/null
	for _ in $(seq 50); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	rm -f "$dir/redis.pid"
}

# rl_start_pg NAME PORT REDISPORT [extra postgresql.conf lines...]
rl_start_pg() {
	local name=$1 port=$2 redisport=$3
	shift 3
	rl_tmp_init
	local dir=$RL_TMP/pg-$name
	rl_as_owner "$RL_PGBIN/initdb" -D "$dir" -A trust -U postgres >/dev/null || return 1
	{
		echo "port = $port"
		echo "listen_addresses = ''"
		echo "unix_socket_directories = '$RL_TMP'"
		echo "fsync = off"
		echo "max_connections = 120"
		echo "shared_preload_libraries = 'ratelimit'"
		echo "ratelimit.redis_port = $redisport"
		for line in "$@"; do echo "$line"; done
	} | rl_as_owner tee -a "$dir/postgresql.conf" >/dev/null
	rl_as_owner "$RL_PGBIN/pg_ctl" -D "$dir" -l "$dir/server.log" -w start >/dev/null || {
		cat "$dir/server.log" >&2
		return 1
	}
	RL_PGDATAS+=("$dir")
	eval "RL_PGPORT_$name=$port"
	rl_psql "$name" -q -c "CREATE EXTENSION ratelimit" || return 1
}

# rl_psql NAME [psql arguments]: psql into database postgres of cluster NAME.
rl_psql() {
	local name=$1
	shift
	local port
	port=$(eval echo "\$RL_PGPORT_$name")
	rl_as_owner "$RL_PGBIN/psql" -X -h "$RL_TMP" -p "$port" -U postgres \
		-d postgres -v ON_ERROR_STOP=1 "$@"
}

rl_stop_all() {
	for dir in "${RL_PGDATAS[@]}"; do
		rl_as_owner "$RL_PGBIN/pg_ctl" -D "$dir" -m immediate stop >/dev/null 2>&1
	done
	RL_PGDATAS=()
	local pids=() pid
	for pidfile in "${RL_PIDS_REDIS[@]}"; do
		[ -f "$pidfile" ] || continue
		pid=$(cat "$pidfile")
		kill -CONT "$pid" 2>/dev/null
		kill "$pid" 2>/dev/null
		pids+=("$pid")
	done
	RL_PIDS_REDIS=()
	# A server writes its last log line as it exits: gone before its
	# directory is removed (5 s at most).
	for pid in "${pids[@]}"; do
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
	done
	if [ -n "${RL_TMP:-}" ] && [ "${RL_KEEP:-0}" != 1 ]; then
		rm -rf "$RL_TMP"
	fi
}
