#!/bin/bash
#
# test/bench/instr.sh
#
# The backend's CPU instructions per check, counted by callgrind: what the
# extension and PostgreSQL's executor spend on each check, whatever else
# runs on the machine.  Throughput on a shared 2-core machine moves by more
# than the 3 % an A/B must resolve (test/bench/results.md, the noise floor
# of 20261202); an instruction count moves by well under 1 %, so it shows a
# change in the C side's cost that throughput cannot.  It does not see the
# time of a Redis round trip or of Redis's scripts (run.sh and
# redis_time.sh do).
#
#   bash test/bench/instr.sh                  # builds and installs first
#   RL_BENCH_ONLY=instr bash test/bench/run.sh
#
# Each case is one statement making N checks, in a session of its own
# (deny cache off) on a server run under valgrind --tool=callgrind, for
# two N; the difference of the two totals over the difference of the
# N is the cost of one check, free of start-up and shut-down.  Rows go to
# stdout and, when RL_BENCH_OUT names a file, are appended to it.

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/servers.sh"

REDIS_PORT=${RL_BENCH_INSTR_REDIS_PORT:-6385}
PG_PORT=${RL_BENCH_INSTR_PG_PORT:-54385}
OUT=${RL_BENCH_OUT:-/dev/null}

if ! command -v valgrind >/dev/null; then
	echo "instr: valgrind is not installed (apt-get install valgrind); skipped"
	exit 0
fi
[ "${RL_BENCH_NO_SETUP:-0}" = 1 ] || rl_setup || exit 1
rl_tmp_init
rl_start_redis instr "$REDIS_PORT" --maxmemory-policy noeviction || exit 1
rl_start_pg instr "$PG_PORT" "$REDIS_PORT" || exit 1
rl_psql instr -q <<-'SQL' || exit 1
CREATE TABLE keys1000 AS SELECT array_agg('m' || g) AS keys FROM generate_series(1, 1000) g;
CREATE TABLE ins_pair (id int, author int);
CREATE TRIGGER count BEFORE INSERT ON ins_pair FOR EACH ROW
	EXECUTE FUNCTION rl_throttle_statement('author', 'token_bucket', '1000000', '1 hour');
CREATE TRIGGER t AFTER INSERT ON ins_pair FOR EACH STATEMENT
	EXECUTE FUNCTION rl_throttle_statement('author', 'token_bucket', '1000000', '1 hour');
CREATE UNLOGGED TABLE fw_unlogged (key text PRIMARY KEY, win bigint NOT NULL, n int NOT NULL);
CREATE FUNCTION fw_allow_unlogged(k text, lim int) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE n int;
BEGIN
	INSERT INTO fw_unlogged AS t VALUES (k, floor(extract(epoch FROM clock_timestamp()))::bigint, 1)
	ON CONFLICT (key) DO UPDATE
	   SET win = excluded.win, n = CASE WHEN t.win = excluded.win THEN t.n + 1 ELSE 1 END
	RETURNING t.n INTO n;
	RETURN n <= lim;
END $$;
SQL
DATA=$RL_TMP/pg-instr
rl_as_owner "$RL_PGBIN/pg_ctl" -D "$DATA" -w stop >/dev/null || exit 1
# The server again, under callgrind: every backend it forks writes its own
# count when it exits (cg.<pid>).  (Not postgres --single: the extension's
# wait set watches the postmaster, which a single-user backend has not.)
CG=$RL_TMP/cg
mkdir -p "$CG"
[ "$(id -u)" = 0 ] && chown postgres: "$CG"
rl_as_owner valgrind --tool=callgrind --callgrind-out-file="$CG/cg.%p" \
	"$RL_PGBIN/postgres" -D "$DATA" >"$CG/server.log" 2>&1 &
for _ in $(seq 300); do
	rl_as_owner "$RL_PGBIN/pg_isready" -q -h "$RL_TMP" -p "$PG_PORT" && break
	sleep 0.2
done

# instr ENGINE SQL N: the instructions of one session (its backend) that
# runs SQL with :N replaced by N (engine redis or local).
instr() {
	local pid
	pid=$(rl_psql instr -qAt -c "SET ratelimit.engine = $1" -c "SET ratelimit.deny_cache = off" \
		-c "SELECT pg_backend_pid()" -c "${2//:N/$3}" 2>"$CG/err" | sed -n 1p)
	if [ -s "$CG/err" ] || [ -z "$pid" ]; then
		head -3 "$CG/err" >&2
		echo 0
		return
	fi
	# The backend writes its count as it exits, after psql has gone.
	for _ in $(seq 100); do
		grep -qs '^totals:' "$CG/cg.$pid" && break
		sleep 0.1
	done
	awk '/^totals:/ { print $2; exit }' "$CG/cg.$pid" 2>/dev/null || echo 0
}

# instr_tx ENGINE STATEMENT N [SETUP]: the instructions of one session
# (its backend) that sends STATEMENT N times, each a query of its own
# (psql -f, the simple protocol, as pgbench sends run.sh's cases), on a
# pinned clock, after the statements SETUP.
instr_tx() {
	local f=$CG/tx.sql pid
	{
		echo "SET ratelimit.engine = $1;"
		echo "SET ratelimit.deny_cache = off;"
		echo "SET ratelimit.test_clock_ms = 1000000000000;"
		echo "${4:-}"
		echo "SELECT pg_backend_pid();"
		for ((i = 0; i < $3; i++)); do echo "$2"; done
	} > "$f"
	pid=$(rl_psql instr -qAt -f "$f" 2>"$CG/err" | sed -n 1p)
	if [ -s "$CG/err" ] || [ -z "$pid" ]; then
		head -3 "$CG/err" >&2
		echo 0
		return
	fi
	for _ in $(seq 100); do
		grep -qs '^totals:' "$CG/cg.$pid" && break
		sleep 0.1
	done
	awk '/^totals:/ { print $2; exit }' "$CG/cg.$pid" 2>/dev/null || echo 0
}

# per_tx NAME ENGINE STATEMENT [SETUP]: one row, instructions per
# statement, over 200 and 1200 statements.
per_tx() {
	local a b v
	a=$(instr_tx "$2" "$3" 200 "${4:-}")
	b=$(instr_tx "$2" "$3" 1200 "${4:-}")
	v=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.0f", (a > 0 && b > 0) ? (b - a) / 1000 : 0 }')
	printf '%s\t%s\t%s\n' "$1" "$v" instr/statement >> "$OUT"
	printf '  %-52s %10s %s\n' "$1" "$v" instr/statement
}

# per NAME ENGINE UNIT SQL N1 N2 CHECKS-PER-N: one row, instructions per check.
per() {
	local a b v
	a=$(instr "$2" "$4" "$5")
	b=$(instr "$2" "$4" "$6")
	v=$(awk -v a="$a" -v b="$b" -v n=$(( ($6 - $5) * $7 )) 'BEGIN { printf "%.0f", (a > 0 && b > 0) ? (b - a) / n : 0 }')
	printf '%s\t%s\t%s\n' "$1" "$v" "$3" >> "$OUT"
	printf '  %-52s %10s %s\n' "$1" "$v" "$3"
}

echo "11. Backend instructions per check (callgrind, a session each, deny cache off)"
# Limits no call reaches: every check takes the same (allowed) path
# however slowly valgrind runs it.  Every call names g, so that it runs
# for every row (a function scan that names no outer column is run once
# and its result read again).
ALLOW="SELECT count((rl_allow('hot', 'token_bucket', 1000000000 + 0 * g, '1 second')).allowed) FROM generate_series(1, :N) g"
MANY="SELECT count(*) FROM generate_series(1, :N) g, keys1000, LATERAL rl_allow_many(keys1000.keys, 'token_bucket', 1000000000 + 0 * g, '1 second')"
LAYERED="SELECT count((rl_allow_layered('hot', ARRAY[('token_bucket', 1000000000, '1 second'), ('fixed_window', 1000000000, '1 hour')]::rl_rule[], 1 + 0 * g)).allowed) FROM generate_series(1, :N) g"
INSERT="INSERT INTO ins_pair SELECT g, g % 1000 FROM generate_series(1, :N) g"
# Once before counting: the first session builds the catalog caches' init
# file and loads the scripts into Redis.
for sql in "$ALLOW" "$MANY" "$LAYERED"; do
	rl_psql instr -qAt -c "SET ratelimit.deny_cache = off" -c "${sql//:N/1}" >/dev/null
done
per "instr rl_allow token_bucket hot" redis instr/check "$ALLOW" 200 1200 1
per "instr rl_allow_many 1000 keys" redis instr/check "$MANY" 1 3 1000
per "instr rl_allow_layered two rules hot" redis instr/check "$LAYERED" 200 1200 1
per "instr insert, rl_throttle_statement row + statement (1000 authors)" redis instr/row "$INSERT" 1000 3000 1
per "instr local rl_allow token_bucket hot" local instr/check "$ALLOW" 1000 6000 1
per "instr local rl_allow_many 1000 keys" local instr/check "$MANY" 2 12 1000
# A statement per check, as run.sh's clients send its target cases (the
# hot key at 100 a second: on the pinned clock, after the first 100 every
# call is denied, as nearly all are in run.sh): the whole cost of a
# transaction, which its throughput ratios divide.
HOT="SELECT allowed FROM rl_allow('hot', 'token_bucket', 100, '1 second');"
per_tx "instr statement SELECT 1" local "SELECT 1;"
per_tx "instr statement rl_allow token_bucket hot" redis "$HOT"
per_tx "instr statement local rl_allow token_bucket hot" local "$HOT"
per_tx "instr statement local rl_allow hot, select list" local \
	"SELECT (rl_allow('hot', 'token_bucket', 100, '1 second')).allowed;"
per_tx "instr statement fw_allow_unlogged function hot" local "SELECT fw_allow_unlogged('k1', 100);"
# A denial answered by the deny cache, as nearly all of run.sh's "default
# settings" cases are: one call an hour is allowed, so after each session's
# first call (a round trip, in both sessions) every call is a cache hit.
# The cache needs the real clock (a pinned one turns it off).
per_tx "instr statement rl_allow, deny cache hit" redis \
	"SELECT allowed FROM rl_allow('cached', 'fixed_window', 1, '1 hour');" \
	"SET ratelimit.test_clock_ms = 0; SET ratelimit.deny_cache = on;"
# Redis down, failure_mode open (run.sh's section 7): the policy's answer.
# One failed connect per session (retry_interval: an hour), its WARNING
# kept from the client; the difference of the two sessions leaves neither.
rl_stop_redis instr
per_tx "instr statement rl_allow, Redis down" redis \
	"SELECT allowed FROM rl_allow('down', 'gcra', 100, '1 second');" \
	"SET ratelimit.retry_interval = '1h'; SET client_min_messages = error;"
