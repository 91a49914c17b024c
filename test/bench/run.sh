#!/bin/bash
#
# test/bench/run.sh
#
# The ratelimit benchmark: every case in one run, against throwaway Redis
# and PostgreSQL servers it starts itself, so that each target is a ratio
# of numbers measured side by side on the same machine.
#
#   bash test/bench/run.sh                       # RL_BENCH_SECONDS=6 per case
#   RL_BENCH_SECONDS=2 bash test/bench/run.sh    # a quick look
#   RL_BENCH_ONLY=stats bash test/bench/run.sh   # only section 10
#   RL_BENCH_ONLY=sentinel bash test/bench/run.sh # only section 10
#   RL_BENCH_ONLY=local bash test/bench/run.sh   # only the local engine (10.)
#   RL_BENCH_ONLY=redis_time bash test/bench/run.sh   # only Redis time per check
#   RL_BENCH_ONLY="c1 many layered triggers local" bash test/bench/run.sh
#
# RL_BENCH_ONLY may also list sections by name: c1 (1.), tables (2.),
# algos (3.), c8 (3b., the c=8 targets), many (4.), layered, triggers (5.),
# flood (6.), down (7.),
# memory (8.), latency (9.), policies, refunds, stats, sentinel, tls, redis_time,
# cluster, local, and instr (test/bench/instr.sh, only when named); only the
# targets whose figures were measured are printed.
# test/bench/ab.sh runs this script for two builds in turns (A/B).
#
# Each pgbench figure is the median of its one-second progress reports
# (the first second left out); latencies are timed call by call by
# rl_latency_bench.c; the cases of a target ratio run side by side in
# rounds of short slices, so drift on a shared machine hits them alike,
# and the ratio is the median of the rounds' own.  Prints a table and the
# ratios against the targets, and writes both to
# test/bench/results/<time>.tsv (case, value, unit).

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/servers.sh"

SECS=${RL_BENCH_SECONDS:-6}
# A slice: one of several interleaved measurements of a case.
slice=$(( (SECS + 2) / 3 + 1 ))
REDIS_PORT=${RL_BENCH_REDIS_PORT:-6381}
PG_PORT=${RL_BENCH_PG_PORT:-54381}
ALGOS="fixed_window sliding_log sliding_counter token_bucket leaky_bucket gcra"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$HERE/results"
OUT=$HERE/results/$STAMP.tsv
declare -A R

# redis_time: Redis time per check, every script beside its minimal one.
redis_time() {
	echo "10. Redis time per check (INFO commandstats usec_per_call), hot key, one case after another"
	bash "$HERE/redis_time.sh" "$REDIS_PORT" "$OUT"
}

# Taking turns with another run (RL_BENCH_PAIR=DIR:SIDE, set by ab.sh):
# two runs, side 0 and side 1, each against its own servers, run as one
# sequence of slots, so that only one of them works at any moment and each
# measurement of one sits next to the same measurement of the other.  Slot
# 0 and 1 are the two set-ups; the k-th measurement's pair of slots is
# 2k, 2k+1, side 0 first when k is odd and side 1 first when it is even, so
# neither side is always the one measured second.  A side holds its slot
# from the start of its measurement to the start of its next one; DIR/turn
# holds the slot now running, and only its holder writes it.  DIR/k.SIDE
# counts a side's turns (measurements run in subshells, $(tps ...), so the
# count cannot live in a variable).  A side that ends leaves its exit
# status in DIR/done.SIDE: the other then stops waiting, and stops too if
# that status is a failure.  Which build is side 0 alternates from pair to
# pair (ab.sh), so over an even number of pairs each build is measured
# first in half of them, case by case.
PAIR=${RL_BENCH_PAIR:-}
PAIR_DIR=${PAIR%:*}
PAIR_SIDE=${PAIR##*:}

# pair_slot K: this side's slot for its K-th turn (0: the set-up).
pair_slot() {
	if (( $1 == 0 )); then
		echo "$PAIR_SIDE"
	elif (( ($1 % 2 == 1) == (PAIR_SIDE == 0) )); then
		echo $((2 * $1))
	else
		echo $((2 * $1 + 1))
	fi
}

# pair_count: how many turns this side has begun.
pair_count() {
	cat "$PAIR_DIR/k.$PAIR_SIDE" 2>/dev/null || echo 0
}

# pair_release K: after K turns begun, the slot this side holds is over;
# the next one may run.
pair_release() {
	(( $1 > 0 )) || return 0
	echo $(( $(pair_slot $(($1 - 1))) + 1 )) > "$PAIR_DIR/turn.$PAIR_SIDE" &&
		mv -f "$PAIR_DIR/turn.$PAIR_SIDE" "$PAIR_DIR/turn"
}

# pair_abort: end the whole run.  A measurement waits in a subshell,
# $(tps ...), whose own exit would end only the measurement.
pair_abort() {
	echo 1 > "$PAIR_DIR/done.$PAIR_SIDE" 2>/dev/null
	kill -TERM $$
	exit 1
}

# pair_turn: give up the slot held, and wait for this side's next one.
pair_turn() {
	[ -n "$PAIR" ] || return 0
	local k slot t
	k=$(pair_count)
	pair_release "$k"
	slot=$(pair_slot "$k")
	echo $((k + 1)) > "$PAIR_DIR/k.$PAIR_SIDE"
	until [ -e "$PAIR_DIR/done.$((1 - PAIR_SIDE))" ]; do
		t=$(cat "$PAIR_DIR/turn" 2>/dev/null) || pair_abort	# the pair's directory is gone
		(( t >= slot )) && break
		sleep 0.05
	done
	# The other side failed: measuring on alone would pair nothing.
	[ "$(cat "$PAIR_DIR/done.$((1 - PAIR_SIDE))" 2>/dev/null || echo 0)" = 0 ] || pair_abort
}

# pair_end STATUS: this side is done (its exit status in DIR/done.SIDE);
# the other need not wait for it again.
pair_end() {
	[ -n "$PAIR" ] && [ ! -e "$PAIR_DIR/done.$PAIR_SIDE" ] || return 0
	echo "$1" > "$PAIR_DIR/done.$PAIR_SIDE"
	pair_release "$(pair_count)"
}

rl_tmp_init
SOCK=$RL_TMP/redis.sock
REDIS_ARGS=(--maxmemory-policy noeviction --unixsocket "$SOCK" --unixsocketperm 777)
if [ "${RL_BENCH_ONLY:-}" = redis_time ]; then
	# Only Redis and the scripts: nothing to build or install.
	printf 'case\tvalue\tunit\n' > "$OUT"
	rl_start_redis bench "$REDIS_PORT" "${REDIS_ARGS[@]}" || exit 1
	echo "ratelimit benchmark $STAMP (section 10 only): $(nproc) cores, redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/')"
	redis_time
	echo "results: $OUT"
	exit 0
fi
trap 'rc=$?; rl_stop_all; pair_end $rc' EXIT
pair_turn
rl_setup || exit 1
rl_start_redis bench "$REDIS_PORT" "${REDIS_ARGS[@]}" || exit 1
# Default durability (fsync on) for the logged tables.
rl_start_pg bench "$PG_PORT" "$REDIS_PORT" "fsync = on" "max_connections = 50" || exit 1
W=$RL_TMP/bench
mkdir -p "$W"
[ "$(id -u)" = 0 ] && chown postgres: "$W"

# record NAME VALUE UNIT
record() {
	R[$1]=$2
	printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$OUT"
	printf '  %-52s %10s %s\n' "$1" "$2" "$3"
}

# median [FORMAT] < numbers, one per line
median() {
	sort -n | awk -v f="${1:-%.0f}" '{ v[NR] = $1 } END {
		if (NR == 0) { print 0; exit }
		printf f, (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# m "n n n": median of a space-separated list.
m() { echo "$1" | tr ' ' '\n' | grep . | median; }

# script NAME < text: a pgbench script file the postgres user can read.
script() {
	cat > "$W/$1.sql"
	chmod 644 "$W/$1.sql"
}

# tps SCRIPT CLIENTS [SECONDS [PGOPTIONS]]: median TPS of a custom script.
tps() {
	local secs=${3:-$SECS}
	pair_turn
	rl_as_owner env PGOPTIONS="${4:-}" "$RL_PGBIN/pgbench" -n -M prepared -P 1 \
		-h "$RL_TMP" -p "$PG_PORT" -U postgres -c "$2" -j "$2" -T "$secs" \
		-f "$W/$1.sql" postgres 2>&1 >/dev/null |
		awk '/^progress: / { v[++n] = $4 }
		     END { for (i = (n >= 3) ? 2 : 1; i <= n; i++) print v[i] }' | median
}

# checks PER SCRIPT [SECONDS [PGOPTIONS]]: checks per second of a script
# making PER checks a transaction, at c=1: PER over the median of each
# second's mean latency (pgbench's "lat").  At 10-100 transactions a
# second a count of whole transactions is off by up to 10 %; the latency
# is exact.
checks() {
	local per=$1 secs=${3:-$SECS}
	pair_turn
	rl_as_owner env PGOPTIONS="${4:-}" "$RL_PGBIN/pgbench" -n -M prepared -P 1 \
		-h "$RL_TMP" -p "$PG_PORT" -U postgres -c 1 -j 1 -T "$secs" \
		-f "$W/$2.sql" postgres 2>&1 >/dev/null |
		awk '/^progress: / && $6 == "lat" { v[++n] = $7 }
		     END { for (i = (n >= 3) ? 2 : 1; i <= n; i++) print v[i] }' |
		median %.4f | awk -v p="$per" '{ printf "%.0f", ($1 > 0) ? p * 1000 / $1 : 0 }'
}

# want SECTION: true when RL_BENCH_ONLY is unset or lists SECTION.
want() {
	[ -z "${RL_BENCH_ONLY:-}" ] || [[ " $RL_BENCH_ONLY " == *" $1 "* ]]
}

# hiredis SECONDS DEPTH KEYS [SOCKET]: median of one-second runs.
hiredis() {
	local target=${4:-$REDIS_PORT}
	pair_turn
	for _ in $(seq "$1"); do
		"$W/hb" "$target" 1 "$2" "$3"
	done | median
}

keyname() {
	[ "$1" = 1 ] && echo hot || echo rand10000
}

UNIX="-c ratelimit.redis_socket=$SOCK"
# Every call a Redis round trip: the deny cache (on by default) would
# answer most calls on a hot key without asking Redis.
OFF="-c ratelimit.deny_cache=off"

# ratio LABEL NUMERATOR DENOMINATOR TARGET: met when NUMERATOR / DENOMINATOR >= TARGET.
# Left out when a figure was not measured (a section not run).
ratio() {
	[ -n "$2" ] && [ -n "$3" ] || return 0
	awk -v l="$1" -v n="$2" -v d="$3" -v t="$4" -v out="$OUT" 'BEGIN {
		r = (d > 0) ? n / d : 0
		v = (r >= t) ? "met" : "MISSED"
		printf "  %-66s %6.2f  (>= %s)  %s\n", l, r, t, v
		printf "ratio %s\t%.3f\t%s\n", l, r, v >> out
	}'
}
# info LABEL NUMERATOR DENOMINATOR: a ratio shown for comparison, not a target.
info() {
	[ -n "$2" ] && [ -n "$3" ] || return 0
	awk -v l="$1" -v n="$2" -v d="$3" -v out="$OUT" 'BEGIN {
		r = (d > 0) ? n / d : 0
		printf "  %-66s %6.2f  (for comparison)\n", l, r
		printf "ratio %s\t%.3f\tinfo\n", l, r >> out
	}'
}
# Server-wide statistics (ratelimit.stats) on against off, on the hot
# key at c=8: with the deny cache on (default; almost every call a denial
# counted for rl_stats_limiters) and off (every call a timed round trip).
# Eleven rounds, each one slice on and one off (the order alternating), so
# drift on a shared machine hits both alike; the ratio is the median of
# the eleven rounds' on/off ratios.
stats_section() {
	echo "10. Server-wide statistics on vs off, hot key c=8 (11 rounds of on/off slices)"
	script tb-hot <<< "SELECT allowed FROM rl_allow('hot', 'token_bucket', 100, '1 second');"
	local slice=$(( (SECS + 2) / 3 + 1 )) mode round order case opts
	declare -A T V
	for round in $(seq 11); do
		order="on off"
		[ $((round % 2)) = 0 ] && order="off on"
		for case in cache nocache; do
			opts=""
			[ $case = nocache ] && opts="$OFF"
			for mode in $order; do
				V[$mode]=$(tps tb-hot 8 "$slice" "$opts -c ratelimit.stats=$mode")
				T[$case-$mode]+="${V[$mode]} "
			done
			T[$case-ratio]+="$(awk -v a="${V[on]}" -v b="${V[off]}" 'BEGIN { printf "%.4f", (b > 0) ? a / b : 0 }') "
		done
	done
	for mode in on off; do
		record "rl_allow hot c=8 default, stats $mode" "$(m "${T[cache-$mode]}")" tps
		record "rl_allow hot c=8 deny cache off, stats $mode" "$(m "${T[nocache-$mode]}")" tps
	done
	echo "   per-round on/off ratios: default ${T[cache-ratio]}; deny cache off ${T[nocache-ratio]}"
	R[stats ratio default]=$(echo "${T[cache-ratio]}" | tr ' ' '\n' | grep . | sort -n | sed -n 6p)
	R[stats ratio nocache]=$(echo "${T[nocache-ratio]}" | tr ' ' '\n' | grep . | sort -n | sed -n 6p)
}

stats_ratios() {
	ratio "rl_allow hot c=8 default: stats on / off (median of 11 rounds)" \
		"${R[stats ratio default]}" 1 0.97
	ratio "rl_allow hot c=8 deny cache off: stats on / off (median of 11 rounds)" \
		"${R[stats ratio nocache]}" 1 0.97
}

# fw_schema: the table limiters users write today, a function around
# INSERT ... ON CONFLICT on a logged and an unlogged table (sections 2,
# 3b and 10 compare rl_allow with them).
fw_schema() {
	rl_psql bench -q <<-'SQL'
	CREATE TABLE IF NOT EXISTS fw_logged (key text PRIMARY KEY, win bigint NOT NULL, n int NOT NULL);
	CREATE UNLOGGED TABLE IF NOT EXISTS fw_unlogged (LIKE fw_logged INCLUDING ALL);
	CREATE OR REPLACE FUNCTION fw_allow_logged(k text, lim int) RETURNS boolean LANGUAGE plpgsql AS $$
	DECLARE n int;
	BEGIN
		INSERT INTO fw_logged AS t VALUES (k, floor(extract(epoch FROM clock_timestamp()))::bigint, 1)
		ON CONFLICT (key) DO UPDATE
		   SET win = excluded.win, n = CASE WHEN t.win = excluded.win THEN t.n + 1 ELSE 1 END
		RETURNING t.n INTO n;
		RETURN n <= lim;
	END $$;
	CREATE OR REPLACE FUNCTION fw_allow_unlogged(k text, lim int) RETURNS boolean LANGUAGE plpgsql AS $$
	DECLARE n int;
	BEGIN
		INSERT INTO fw_unlogged AS t VALUES (k, floor(extract(epoch FROM clock_timestamp()))::bigint, 1)
		ON CONFLICT (key) DO UPDATE
		   SET win = excluded.win, n = CASE WHEN t.win = excluded.win THEN t.n + 1 ELSE 1 END
		RETURNING t.n INTO n;
		RETURN n <= lim;
	END $$;
	SQL
}

# Rounds: a few cases, one slice each a round, the order rotating by one
# from round to round, so that drift on a shared machine hits them alike
# and none is always measured right after another.  A target ratio is then
# the median of the rounds' own ratios.
declare -A RR
# rounds N NAME:SCRIPT:CLIENTS[:PGOPTIONS] ...: N rounds; each case's
# slices go to RR[NAME], in round order.
rounds() {
	local n=$1 r j name scr cl opts
	shift
	local cases=("$@")
	for r in $(seq 0 $((n - 1))); do
		for j in $(seq 0 $(($# - 1))); do
			IFS=: read -r name scr cl opts <<< "${cases[$(( (r + j) % $# ))]}"
			RR[$name]+="$(tps "$scr" "$cl" "$slice" "$opts") "
		done
	done
}
# per_round "N N ..." "D D ...": the median of the rounds' own N/D.
per_round() {
	paste <(echo "$1" | tr ' ' '\n' | grep .) <(echo "$2" | tr ' ' '\n' | grep .) |
		awk '{ printf "%.4f\n", ($2 > 0) ? $1 / $2 : 0 }' | median %.4f
}

# The local engine (issue 15): ratelimit.engine = local beside SELECT 1
# and the table limiters, in one go.  RL_BENCH_ONLY=local runs only this.
LOCAL="-c ratelimit.engine=local -c ratelimit.deny_cache=off"
bench_local() {
	local sel="" loc="" locs="" sel8="" own="" owns="" hot8="" hot8s="" fwu="" fwl="" r
	echo "10. The local engine (shared memory), deny cache off"
	fw_schema
	rl_psql bench -q <<-'SQL'
	CREATE TABLE IF NOT EXISTS keys1000 AS
		SELECT array_agg('m' || g) AS keys FROM generate_series(1, 1000) g;
	SQL
	script select1 <<< 'SELECT 1;'
	script l-hot <<< "SELECT allowed FROM rl_allow('hot', 'token_bucket', 100, '1 second');"
	# The same call in the select list: no function scan (PostgreSQL's
	# cost of a set-returning FROM item, most of what it adds to SELECT 1).
	script l-hot-sel <<< "SELECT (rl_allow('hot', 'token_bucket', 100, '1 second')).allowed;"
	script l-own <<< "SELECT allowed FROM rl_allow('own' || :client_id, 'token_bucket', 100, '1 second');"
	script l-own-sel <<< "SELECT (rl_allow('own' || :client_id, 'token_bucket', 100, '1 second')).allowed;"
	script l-fwl <<< "SELECT fw_allow_logged('k1', 100);"
	script l-fwu <<< "SELECT fw_allow_unlogged('k1', 100);"
	script l-many <<< "SELECT count(*) FROM keys1000, LATERAL rl_allow_many(keys1000.keys, 'token_bucket', 100, '1 second');"
	for _ in 1 2 3 4 5; do
		sel+="$(tps select1 1 "$slice") "
		loc+="$(tps l-hot 1 "$slice" "$LOCAL") "
		locs+="$(tps l-hot-sel 1 "$slice" "$LOCAL") "
	done
	# At c=8 too, SELECT 1 and the 8 keys take turns, so that both see
	# the same machine (the median of 5 slices each).
	for _ in 1 2 3 4 5; do
		sel8+="$(tps select1 8 "$slice") "
		own+="$(tps l-own 8 "$slice" "$LOCAL") "
		owns+="$(tps l-own-sel 8 "$slice" "$LOCAL") "
	done
	# The hot key against the unlogged table's limiter, in turns as well;
	# that limiter is a scalar function in the select list, so the hot key
	# is measured in both forms.
	for _ in 1 2 3 4 5; do
		hot8+="$(tps l-hot 8 "$slice" "$LOCAL") "
		hot8s+="$(tps l-hot-sel 8 "$slice" "$LOCAL") "
		fwu+="$(tps l-fwu 8 "$slice") "
		fwl+="$(tps l-fwl 8 "$slice") "
	done
	lm() { echo "$1" | tr ' ' '\n' | grep . | median; }
	record "local select1 c=1 (interleaved)" "$(lm "$sel")" tps
	record "local rl_allow token_bucket hot c=1" "$(lm "$loc")" tps
	record "local rl_allow token_bucket hot c=1, select list" "$(lm "$locs")" tps
	record "local rl_allow token_bucket hot c=8" "$(lm "$hot8")" tps
	record "local rl_allow token_bucket hot c=8, select list" "$(lm "$hot8s")" tps
	record "local fw_unlogged function hot c=8" "$(lm "$fwu")" tps
	record "local fw_logged function hot c=8" "$(lm "$fwl")" tps
	record "local select1 c=8" "$(lm "$sel8")" tps
	record "local rl_allow token_bucket 8 keys (one per client) c=8" "$(lm "$own")" tps
	record "local rl_allow token_bucket 8 keys c=8, select list" "$(lm "$owns")" tps
	record "local rl_allow_many 1000 keys c=1" "$(($(tps l-many 1 "$SECS" "$LOCAL") * 1000))" checks/s
	r=$(rl_psql bench -qAt -c "SELECT size FROM pg_shmem_allocations WHERE name = 'ratelimit local engine'")
	record "local shared memory, ratelimit.local_max_entries = 10000" "$r" bytes
	record "local shared memory per entry" "$((r / 10000))" bytes
	r=$(rl_psql bench -qAt -c "SELECT size FROM pg_shmem_allocations WHERE name = 'ratelimit local engine logs'")
	record "local sliding-log pool, ratelimit.local_log_entries = 262144" "$r" bytes
	record "local sliding-log pool per call kept" "$((r / 262144))" bytes
	lratio() {
		awk -v l="$1" -v n="$2" -v d="$3" -v t="$4" -v out="$OUT" 'BEGIN {
			r = (d > 0) ? n / d : 0
			printf "  %-66s %6.2f  (>= %s)  %s\n", l, r, t, (r >= t) ? "met" : "MISSED"
			printf "ratio %s\t%.3f\t%s\n", l, r, (r >= t) ? "met" : "MISSED" >> out
		}'
	}
	echo "   targets (issue 15)"
	# Each ratio is the median of the rounds' own (the cases above take
	# turns round by round).
	lratio "local c=1 / SELECT 1 c=1" "$(per_round "$loc" "$sel")" 1 0.8
	lratio "local c=1, select list / SELECT 1 c=1" "$(per_round "$locs" "$sel")" 1 0.8
	lratio "local hot c=8 / fw_unlogged function hot c=8" "$(per_round "$hot8" "$fwu")" 1 3
	lratio "local hot c=8, select list / fw_unlogged function hot c=8" "$(per_round "$hot8s" "$fwu")" 1 3
	lratio "local hot c=8 / fw_logged function hot c=8" "$(per_round "$hot8" "$fwl")" 1 10
	lratio "local 8 keys c=8 / SELECT 1 c=8" "$(per_round "$own" "$sel8")" 1 0.8
	lratio "local 8 keys c=8, select list / SELECT 1 c=8" "$(per_round "$owns" "$sel8")" 1 0.8
	lratio "local rl_allow_many checks/s / 1 000 000" "${R[local rl_allow_many 1000 keys c=1]}" 1000000 1
}
if [ "${RL_BENCH_ONLY:-}" = local ]; then
	echo "ratelimit benchmark $STAMP (local engine only): $(nproc) cores, $SECS s per case"
	printf 'case\tvalue\tunit\n' > "$OUT"
	bench_local
	echo "results: $OUT"
	exit 0
fi

echo "ratelimit benchmark $STAMP: $(nproc) cores, $SECS s per case"
printf 'case\tvalue\tunit\n' > "$OUT"

# RL_BENCH_ONLY=stats: only the statistics case and its ratios.
if [ "${RL_BENCH_ONLY:-}" = stats ]; then
	stats_section
	echo
	echo "Targets (ratios within this run)"
	stats_ratios
	echo
	echo "results: $OUT"
	exit 0
fi

# Section 10: rl_allow c=1 in Sentinel mode beside standalone, on the same
# Redis: one Sentinel (port 26381) monitors the bench server, with the
# default sentinel_check_interval (1 s), so a backend asks it about once
# a second.  Five interleaved slices.
sentinel_case() {
	local sport=${RL_BENCH_SENTINEL_PORT:-26381} dir=$RL_TMP/sentinel
	local slice=$(( (SECS + 2) / 3 + 1 ))
	mkdir -p "$dir"
	[ "$(id -u)" = 0 ] && chown postgres: "$dir"
	rl_as_owner tee "$dir/sentinel.conf" >/dev/null <<-EOF
	port $sport
	bind 127.0.0.1
	daemonize yes
	pidfile $dir/sentinel.pid
	logfile $dir/sentinel.log
	dir $dir
	sentinel monitor mymaster 127.0.0.1 $REDIS_PORT 1
	EOF
	rl_as_owner redis-server "$dir/sentinel.conf" --sentinel || return 1
	for _ in $(seq 50); do
		redis-cli -p "$sport" PING >/dev/null 2>&1 && break
		sleep 0.1
	done
	RL_PIDS_REDIS+=("$dir/sentinel.pid")
	script sentinel-hot <<< "SELECT allowed FROM rl_allow('hot', 'token_bucket', 100, '1 second');"
	local SEN="-c ratelimit.redis_mode=sentinel -c ratelimit.redis_nodes=127.0.0.1:$sport"
	declare -A SS
	for _ in 1 2 3 4 5; do
		SS[standalone]+="$(tps sentinel-hot 1 "$slice" "$OFF") "
		SS[sentinel]+="$(tps sentinel-hot 1 "$slice" "$OFF $SEN") "
	done
	# The Sentinel-mode calls must have been Redis's answers, not the
	# failure policy's (which would be fast too).
	local st
	st=$(PGOPTIONS="$OFF $SEN" rl_psql bench -qAt -c "SELECT allowed FROM rl_allow('hot', 'token_bucket', 100, '1 second')" \
		-c "SELECT endpoint || ' fail_open=' || fail_open FROM rl_status()" | tail -1)
	echo "   $st"
	case $st in
	"sentinel:mymaster@127.0.0.1:$REDIS_PORT fail_open=0") ;;
	*) echo "Sentinel mode did not reach the bench Redis"; return 1 ;;
	esac
	record "rl_allow token_bucket hot c=1 standalone (beside sentinel)" "$(m "${SS[standalone]}")" tps
	record "rl_allow token_bucket hot c=1 sentinel" "$(m "${SS[sentinel]}")" tps
}
if [ "${RL_BENCH_ONLY:-}" = sentinel ]; then
	m() { echo "$1" | tr ' ' '\n' | grep . | median; }
	echo "10. rl_allow c=1 in Sentinel mode beside standalone (5 interleaved slices)"
	sentinel_case || exit 1
	awk -v n="${R[rl_allow token_bucket hot c=1 sentinel]}" \
		-v d="${R[rl_allow token_bucket hot c=1 standalone (beside sentinel)]}" -v out="$OUT" 'BEGIN {
		r = (d > 0) ? n / d : 0
		printf "  %-66s %6.2f  (>= 0.95)  %s\n", "rl_allow c=1 sentinel / standalone", r, (r >= 0.95) ? "met" : "MISSED"
		printf "ratio rl_allow c=1 sentinel / standalone\t%.3f\t%s\n", r, (r >= 0.95) ? "met" : "MISSED" >> out
	}'
	echo "results: $OUT"
	exit 0
fi

# rl_scripts_gen.h is in src/redis/ since 8f639f5, in src/ before (ab.sh
# runs this script on older builds too).
gcc -O2 -I"$RL_ROOT/src/redis" -I"$RL_ROOT/src" -o "$W/hb" "$HERE/rl_hiredis_bench.c" -lhiredis || exit 1
script select1 <<< 'SELECT 1;'
script tb-hot <<< "SELECT allowed FROM rl_allow('hot', 'token_bucket', 100, '1 second');"
# Each section below runs when want says so (RL_BENCH_ONLY).
if want c1; then
echo "1. Floors and ceilings, and rl_allow at c=1 beside them (7 interleaved slices)"
declare -A S
for _ in 1 2 3 4 5 6 7; do
	S[select1]+="$(tps select1 1 "$slice") "
	S[hsync]+="$(hiredis $((slice - 1)) 1 1) "
	S[hsyncu]+="$(hiredis $((slice - 1)) 1 1 "$SOCK") "
	S[rl]+="$(tps tb-hot 1 "$slice" "$OFF") "
	S[rlu]+="$(tps tb-hot 1 "$slice" "$OFF $UNIX") "
done
record "select1 c=1" "$(m "${S[select1]}")" tps
record "hiredis sync tcp hot" "$(m "${S[hsync]}")" calls/s
record "hiredis sync unix hot" "$(m "${S[hsyncu]}")" calls/s
record "rl_allow token_bucket hot c=1 tcp" "$(m "${S[rl]}")" tps
record "rl_allow token_bucket hot c=1 unix" "$(m "${S[rlu]}")" tps
# The ceiling of each round, 1 / (1/SELECT-1 + 1/hiredis-sync), for the
# targets' median of the rounds' own ratios.
ceilings() {
	paste <(echo "$1" | tr ' ' '\n' | grep .) <(echo "$2" | tr ' ' '\n' | grep .) |
		awk '{ printf "%.0f ", ($1 > 0 && $2 > 0) ? 1 / (1 / $1 + 1 / $2) : 0 }'
}
R[c1 tcp]=$(per_round "${S[rl]}" "$(ceilings "${S[select1]}" "${S[hsync]}")")
R[c1 unix]=$(per_round "${S[rlu]}" "$(ceilings "${S[select1]}" "${S[hsyncu]}")")
record "select1 c=8" "$(tps select1 8)" tps
record "hiredis pipe64 tcp rand10000" "$(hiredis "$SECS" 64 10000)" calls/s
record "redis-benchmark ping c=1" "$(redis-benchmark -p "$REDIS_PORT" -t ping -c 1 \
	-n $((SECS * 15000)) --csv | awk -F'"' '/PING_MBULK/ { printf "%.0f", $4 }')" ops/s
fi

if want tables; then
echo "2. Table limiters in SQL (limit 100 per second), as a statement and as a PL/pgSQL function"
fw_schema
rl_psql bench -q <<'SQL'
CREATE UNLOGGED TABLE slog (key text NOT NULL, ts timestamptz NOT NULL);
CREATE INDEX ON slog (key, ts);
CREATE FUNCTION slog_allow(k text, lim int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	DELETE FROM slog WHERE key = k AND ts <= clock_timestamp() - interval '1 second';
	IF (SELECT count(*) FROM slog WHERE key = k) >= lim THEN
		RETURN false;
	END IF;
	INSERT INTO slog VALUES (k, clock_timestamp());
	RETURN true;
END $$;
SQL
for keys in 1 10000; do
	for t in fw_logged fw_unlogged; do
		script "$t-stmt-$keys" <<-PGB
		\set k random(1, $keys)
		INSERT INTO $t AS t VALUES ('k' || :k, floor(extract(epoch FROM clock_timestamp()))::bigint, 1)
		ON CONFLICT (key) DO UPDATE
		   SET win = excluded.win, n = CASE WHEN t.win = excluded.win THEN t.n + 1 ELSE 1 END
		RETURNING n <= 100;
		PGB
		script "$t-func-$keys" <<-PGB
		\set k random(1, $keys)
		SELECT fw_allow_${t#fw_}('k' || :k, 100);
		PGB
	done
	script "slog-func-$keys" <<-PGB
	\set k random(1, $keys)
	SELECT slog_allow('k' || :k, 100);
	PGB
done
for c in 1 8; do
	for keys in 1 10000; do
		for t in fw_logged-stmt fw_unlogged-stmt fw_logged-func fw_unlogged-func slog-func; do
			record "$t $(keyname $keys) c=$c" "$(tps "$t-$keys" $c)" tps
		done
	done
done
fi

if want algos; then
echo "3. rl_allow, every algorithm (limit 100 per second), over TCP, deny cache off"
for a in $ALGOS; do
	for keys in 1 10000; do
		script "$a-$keys" <<-PGB
		\set k random(1, $keys)
		SELECT allowed FROM rl_allow('k' || :k, '$a', 100, '1 second');
		PGB
		for c in 1 8; do
			record "rl_allow $a $(keyname $keys) c=$c" "$(tps "$a-$keys" $c "$SECS" "$OFF")" tps
		done
	done
done
record "rl_allow token_bucket hot c=8 unix" "$(tps token_bucket-1 8 "$SECS" "$OFF $UNIX")" tps
record "rl_allow token_bucket rand10000 c=8 unix" "$(tps token_bucket-10000 8 "$SECS" "$OFF $UNIX")" tps
echo "   the hot key with default settings (deny cache on)"
record "rl_allow token_bucket hot c=8 default" "$(tps token_bucket-1 8)" tps
record "rl_allow token_bucket hot c=8 unix default" "$(tps token_bucket-1 8 "$SECS" "$UNIX")" tps
fi

# The c=8 targets measured side by side: rl_allow with default settings
# against the three table limiters, in rounds (see rounds).  Sections 2 and
# 3 measure the same cases minutes apart, which on a shared machine moves
# their ratios by more than the differences an A/B must see.
if want c8; then
echo "3b. The c=8 targets: rl_allow with default settings beside the table limiters, hot key (9 rounds)"
fw_schema
script c8-rl <<< "SELECT allowed FROM rl_allow('k1', 'token_bucket', 100, '1 second');"
script c8-fwl-func <<< "SELECT fw_allow_logged('k1', 100);"
script c8-fwu-func <<< "SELECT fw_allow_unlogged('k1', 100);"
script c8-fwu-stmt <<-'PGB'
INSERT INTO fw_unlogged AS t VALUES ('k1', floor(extract(epoch FROM clock_timestamp()))::bigint, 1)
ON CONFLICT (key) DO UPDATE
   SET win = excluded.win, n = CASE WHEN t.win = excluded.win THEN t.n + 1 ELSE 1 END
RETURNING n <= 100;
PGB
rounds 9 rl:c8-rl:8 rlu:c8-rl:8:"$UNIX" fwl:c8-fwl-func:8 fwu:c8-fwu-func:8 fwus:c8-fwu-stmt:8
echo "   slices: rl_allow tcp ${RR[rl]}; unix ${RR[rlu]}"
echo "   slices: fw_logged function ${RR[fwl]}; fw_unlogged function ${RR[fwu]}; statement ${RR[fwus]}"
record "rl_allow token_bucket hot c=8 default (rounds)" "$(m "${RR[rl]}")" tps
record "rl_allow token_bucket hot c=8 unix default (rounds)" "$(m "${RR[rlu]}")" tps
record "fw_logged-func hot c=8 (rounds)" "$(m "${RR[fwl]}")" tps
record "fw_unlogged-func hot c=8 (rounds)" "$(m "${RR[fwu]}")" tps
record "fw_unlogged-stmt hot c=8 (rounds)" "$(m "${RR[fwus]}")" tps
for tr in rl rlu; do
	R[c8 $tr fwl]=$(per_round "${RR[$tr]}" "${RR[fwl]}")
	R[c8 $tr fwu]=$(per_round "${RR[$tr]}" "${RR[fwu]}")
	R[c8 $tr fwus]=$(per_round "${RR[$tr]}" "${RR[fwus]}")
done
fi

if want many; then
echo "4. rl_allow_many, 1000 keys per call, deny cache off"
rl_psql bench -q -c "CREATE TABLE keys1000 AS
	SELECT array_agg('m' || g) AS keys FROM generate_series(1, 1000) g"
script many <<-'PGB'
SELECT count(*) FROM keys1000, LATERAL rl_allow_many(keys1000.keys, 'token_bucket', 100, '1 second');
PGB
record "rl_allow_many 1000 keys c=1 tcp" "$(($(tps many 1 "$SECS" "$OFF") * 1000))" checks/s
record "rl_allow_many 1000 keys c=1 unix" "$(($(tps many 1 "$SECS" "$OFF $UNIX") * 1000))" checks/s
# The same 1000 keys as 1000 single rl_allow calls in one statement (so
# that only the batching differs), in five slices taking turns with the
# batch: issue 27's target is the batch at >= 5 times the single calls.
script single1000 <<-'PGB'
SELECT count(*) FROM keys1000, LATERAL unnest(keys1000.keys) k,
	LATERAL rl_allow(k, 'token_bucket', 100, '1 second');
PGB
declare -A B
for _ in 1 2 3 4 5; do
	B[single]+="$(checks 1000 single1000 "$slice" "$OFF") "
	B[many]+="$(checks 1000 many "$slice" "$OFF") "
done
record "1000 single rl_allow calls in one statement c=1 tcp" "$(m "${B[single]}")" checks/s
record "rl_allow_many 1000 keys c=1 tcp (beside single calls)" "$(m "${B[many]}")" checks/s
fi

if want layered; then
echo "4b. rl_allow_layered, two rules, c=1 tcp, beside rl_allow (5 interleaved slices), deny cache off"
script layered-hot <<-'PGB'
SELECT allowed FROM rl_allow_layered('hot', ARRAY[('token_bucket', 100, '1 second'),
	('fixed_window', 100000, '1 hour')]::rl_rule[]);
PGB
declare -A L
for _ in 1 2 3 4 5; do
	L[single]+="$(tps tb-hot 1 "$slice" "$OFF") "
	L[layered]+="$(tps layered-hot 1 "$slice" "$OFF") "
done
record "rl_allow token_bucket hot c=1 tcp (beside layered)" "$(m "${L[single]}")" tps
record "rl_allow_layered two rules hot c=1 tcp" "$(m "${L[layered]}")" tps
fi

if want triggers; then
echo "5. 100 000-row INSERT and COPY into a logged table (1000 authors), median of 9"
rl_psql bench -q <<-'SQL'
CREATE TABLE ins_plain (id int, author int);
CREATE TABLE ins_noop (LIKE ins_plain);
CREATE TABLE ins_row (LIKE ins_plain);
CREATE TABLE ins_stmt (LIKE ins_plain);
CREATE TABLE ins_pair (LIKE ins_plain);
-- PostgreSQL's own cost of a statement trigger with a transition table.
CREATE FUNCTION noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER t AFTER INSERT ON ins_noop REFERENCING NEW TABLE AS n
	FOR EACH STATEMENT EXECUTE FUNCTION noop();
CREATE TRIGGER t BEFORE INSERT ON ins_row FOR EACH ROW
	EXECUTE FUNCTION rl_throttle('author', 'token_bucket', '1000000', '1 hour');
-- The statement trigger in its two forms: one trigger reading a
-- transition table, or a row trigger that counts and a statement
-- trigger that checks.
CREATE TRIGGER t AFTER INSERT ON ins_stmt REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT
	EXECUTE FUNCTION rl_throttle_statement('author', 'token_bucket', '1000000', '1 hour');
CREATE TRIGGER count BEFORE INSERT ON ins_pair FOR EACH ROW
	EXECUTE FUNCTION rl_throttle_statement('author', 'token_bucket', '1000000', '1 hour');
CREATE TRIGGER t AFTER INSERT ON ins_pair FOR EACH STATEMENT
	EXECUTE FUNCTION rl_throttle_statement('author', 'token_bucket', '1000000', '1 hour');
SQL
rl_as_owner rm -f "$RL_TMP/rows.copy"
rl_psql bench -qc "COPY (SELECT g, g % 1000 FROM generate_series(1, 100000) g) TO '$RL_TMP/rows.copy'"
# ins_nored: the two-trigger form pointed at a closed port, so the
# failure policy (open) answers: what PostgreSQL's side costs without
# Redis.  copy_*: the same rows loaded by COPY from a file.  Each timed
# statement starts after a CHECKPOINT (untimed), so none pays for the
# dirty pages and new WAL segments the one before it left behind.
declare -A INS
for i in 1 2 3 4 5 6 7 8 9; do
	for v in ins_plain ins_noop ins_row ins_stmt ins_pair ins_nored \
		copy_plain copy_stmt copy_pair; do
		[ "$v" = ins_row ] && [ "$i" -gt 1 ] && continue
		t=$v opts= load="INSERT INTO \$t SELECT g, g % 1000 FROM generate_series(1, 100000) g"
		[ "$v" = ins_nored ] && t=ins_pair opts="-c ratelimit.redis_port=1"
		case $v in copy_*) t=ins_${v#copy_} load="COPY \$t FROM '$RL_TMP/rows.copy'" ;; esac
		INS[$v]+="$(PGOPTIONS="$opts" rl_psql bench -qAt 2>/dev/null <<-SQL
		TRUNCATE $t;
		CHECKPOINT;
		CREATE TEMP TABLE t0 AS SELECT clock_timestamp() AS t;
		${load//\$t/$t};
		SELECT round(extract(epoch FROM clock_timestamp() - t) * 1000) FROM t0;
		SQL
		) "
		# From here on only rl_throttle_statement runs scripts.
		[ "$v" = ins_row ] && redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
	done
done
record "insert 100000 rows, no trigger" "$(m "${INS[ins_plain]}")" ms
record "insert 100000 rows, empty transition trigger" "$(m "${INS[ins_noop]}")" ms
record "insert 100000 rows, rl_throttle_statement, transition table" "$(m "${INS[ins_stmt]}")" ms
record "insert 100000 rows, rl_throttle_statement, row + statement" "$(m "${INS[ins_pair]}")" ms
record "insert 100000 rows, rl_throttle_statement, row + statement, no Redis" "$(m "${INS[ins_nored]}")" ms
record "insert 100000 rows, rl_throttle (row, once)" "$(m "${INS[ins_row]}")" ms
record "copy 100000 rows, no trigger" "$(m "${INS[copy_plain]}")" ms
record "copy 100000 rows, rl_throttle_statement, transition table" "$(m "${INS[copy_stmt]}")" ms
record "copy 100000 rows, rl_throttle_statement, row + statement" "$(m "${INS[copy_pair]}")" ms
record "rl_throttle_statement: Redis time per 64-key script (1000 keys: 16 of them)" "$(redis-cli -p "$REDIS_PORT" \
	INFO commandstats | awk -F'[=,]' '/^cmdstat_(fcall|evalsha):/ { printf "%.0f", $6; exit }')" us
fi

if want flood; then
echo "6. A flood on one denied key (gcra 10 per 10 s), c=8, deny cache off and on"
script flood <<< "SELECT allowed FROM rl_allow('flood', 'gcra', 10, '10 seconds');"
for cache in off on; do
	redis-cli -p "$REDIS_PORT" CONFIG RESETSTAT >/dev/null
	record "flood c=8 deny_cache=$cache" "$(tps flood 8 "$SECS" "-c ratelimit.deny_cache=$cache")" tps
	calls=$(redis-cli -p "$REDIS_PORT" INFO commandstats |
		awk -F'[=,]' '/^cmdstat_(fcall|evalsha):/ { s += $2 } END { print s + 0 }')
	record "flood c=8 deny_cache=$cache: Redis calls per second" "$((${calls:-0} / SECS))" calls/s
done
fi

if want down; then
echo "7. Redis down, failure_mode open (7 interleaved slices)"
script down <<< "SELECT allowed FROM rl_allow('down', 'gcra', 100, '1 second');"
rl_stop_redis bench
# Interleaved slices, like the round-trip ceiling: the two are compared.
declare -A D
for _ in 1 2 3 4 5 6 7; do
	D[down]+="$(tps down 1 "$slice") "
	D[select1]+="$(tps select1 1 "$slice") "
done
record "rl_allow redis down c=1" "$(m "${D[down]}")" tps
record "select1 c=1 beside the down case" "$(m "${D[select1]}")" tps
R[down ratio]=$(per_round "${D[down]}" "${D[select1]}")
rl_start_redis bench "$REDIS_PORT" "${REDIS_ARGS[@]}" || exit 1
sleep 1.1					# past retry_interval after the restart
fi

if want memory; then
echo "8. Memory per key (MEMORY USAGE)"
for a in $ALGOS; do
	rl_psql bench -qAt -c "SELECT allowed FROM rl_allow('mem', '$a', 100000, '1 hour')" >/dev/null
	k=$(redis-cli -p "$REDIS_PORT" --scan --pattern "rl:{*:mem}:$a:100000:3600000ms")
	record "memory $a, 1 unit" "$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "$k")" bytes
done
for n in 100 1000; do
	rl_psql bench -qAt -c "SELECT rl_reset('mem', 'sliding_log', 100000, '1 hour')" \
		-c "SELECT count((rl_allow('mem', 'sliding_log', 100000, '1 hour')).allowed)
		    FROM generate_series(1, $n)" >/dev/null
	k=$(redis-cli -p "$REDIS_PORT" --scan --pattern "rl:{*:mem}:sliding_log:100000:3600000ms")
	record "memory sliding_log, $n units" "$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "$k")" bytes
done
fi

if want latency; then
echo "9. Latency per call (p50, p99, p99.9 in ms), timed call by call by a libpq client"
# pgbench's per-transaction log would do, but PostgreSQL 15's pgbench logs
# 0 us for most transactions once clients share a loop turn (see the C file).
gcc -O2 -I"$("$RL_PGBIN/pg_config" --includedir)" -o "$W/lat" "$HERE/rl_latency_bench.c" \
	-L"$("$RL_PGBIN/pg_config" --libdir)" -lpq || exit 1
# latency SQL CLIENTS [OPTIONS]: "p50 p99 p99.9" of one run.
latency() {
	pair_turn
	rl_as_owner "$W/lat" "host=$RL_TMP port=$PG_PORT user=postgres dbname=postgres options='${3:-}'" \
		"$2" "$SECS" "$1"
}
for c in 1 8; do
	read -r p50 p99 p999 <<<"$(latency 'SELECT 1' $c)"
	record "latency select1 c=$c p50" "$p50" ms
	record "latency select1 c=$c p99" "$p99" ms
	record "latency select1 c=$c p99.9" "$p999" ms
	read -r p50 p99 p999 <<<"$(latency "SELECT allowed FROM rl_allow('hot', 'token_bucket', 100, '1 second')" $c "$OFF")"
	record "latency rl_allow token_bucket hot c=$c p50" "$p50" ms
	record "latency rl_allow token_bucket hot c=$c p99" "$p99" ms
	record "latency rl_allow token_bucket hot c=$c p99.9" "$p999" ms
done
fi

# Named policies (issue 24): rl_allow(key, policy) beside the parameter
# form on the same hot key, at c=1, every call a round trip (deny cache
# off), in six interleaved slices, the order alternating (the second of
# two slices ran measurably slower on a shared machine).  The policy
# cache must add no round trip and no catalog read: the target is 0.97.
if want policies; then
echo "10. rl_allow by policy name beside the parameter form, hot c=1 tcp (6 interleaved slices)"
rl_psql bench -q -c "INSERT INTO rl_policies (name, algo, \"limit\", \"window\")
	VALUES ('bench.tb', 'token_bucket', 100, '1 second') ON CONFLICT (name) DO NOTHING" || exit 1
script tb-hot-policy <<< "SELECT allowed FROM rl_allow('hot', 'bench.tb');"
declare -A PS
for round in 1 2 3 4 5 6; do
	if [ $((round % 2)) = 1 ]; then
		PS[param]+="$(tps tb-hot 1 "$slice" "$OFF") "
		PS[policy]+="$(tps tb-hot-policy 1 "$slice" "$OFF") "
	else
		PS[policy]+="$(tps tb-hot-policy 1 "$slice" "$OFF") "
		PS[param]+="$(tps tb-hot 1 "$slice" "$OFF") "
	fi
done
echo "   slices: parameter form ${PS[param]}; by policy ${PS[policy]}"
record "rl_allow token_bucket hot c=1 tcp (beside policy)" "$(m "${PS[param]}")" tps
record "rl_allow by policy token_bucket hot c=1 tcp" "$(m "${PS[policy]}")" tps
fi

# Refunds on rollback (issue 25): a committed rl_allow by a policy that
# refunds beside one by a policy that does not, hot c=1, every call a
# round trip, in six interleaved slices (the order alternating).  Nothing
# is sent at commit, so the target is 0.95.
if want refunds; then
echo "11. committed rl_allow with refunds on beside refunds off, hot c=1 tcp (6 interleaved slices)"
rl_psql bench -q -c "INSERT INTO rl_policies (name, algo, \"limit\", \"window\", refund_on_abort)
	VALUES ('bench.norefund', 'token_bucket', 100, '1 second', false),
	       ('bench.refund', 'token_bucket', 100, '1 second', true)
	ON CONFLICT (name) DO NOTHING" || exit 1
script tb-hot-norefund <<< "SELECT allowed FROM rl_allow('hot', 'bench.norefund');"
script tb-hot-refund <<< "SELECT allowed FROM rl_allow('hot', 'bench.refund');"
declare -A RS
for round in 1 2 3 4 5 6; do
	if [ $((round % 2)) = 1 ]; then
		RS[off]+="$(tps tb-hot-norefund 1 "$slice" "$OFF") "
		RS[on]+="$(tps tb-hot-refund 1 "$slice" "$OFF") "
	else
		RS[on]+="$(tps tb-hot-refund 1 "$slice" "$OFF") "
		RS[off]+="$(tps tb-hot-norefund 1 "$slice" "$OFF") "
	fi
done
echo "   slices: refunds off ${RS[off]}; refunds on ${RS[on]}"
record "rl_allow by policy, refunds off, hot c=1 tcp" "$(m "${RS[off]}")" tps
record "rl_allow by policy, refunds on, committed, hot c=1 tcp" "$(m "${RS[on]}")" tps
# A concurrency check and its release at the commit: two round trips.
echo "11b. a concurrency check and its release at commit beside rl_allow, hot c=1 tcp (6 interleaved slices)"
rl_psql bench -q -c "INSERT INTO rl_policies (name, algo, \"limit\", \"window\")
	VALUES ('bench.cc', 'concurrency', 1000, '1 minute') ON CONFLICT (name) DO NOTHING" || exit 1
script cc-hot <<< "SELECT allowed FROM rl_allow('hot-cc', 'bench.cc');"
declare -A CS
for round in 1 2 3 4 5 6; do
	if [ $((round % 2)) = 1 ]; then
		CS[allow]+="$(tps tb-hot-norefund 1 "$slice" "$OFF") "
		CS[cc]+="$(tps cc-hot 1 "$slice" "$OFF") "
	else
		CS[cc]+="$(tps cc-hot 1 "$slice" "$OFF") "
		CS[allow]+="$(tps tb-hot-norefund 1 "$slice" "$OFF") "
	fi
done
echo "   slices: rl_allow ${CS[allow]}; concurrency check + release ${CS[cc]}"
record "rl_allow by policy hot c=1 tcp (beside concurrency)" "$(m "${CS[allow]}")" tps
record "concurrency check + release at commit, hot c=1 tcp" "$(m "${CS[cc]}")" tps
fi

want stats && stats_section

if want sentinel; then
echo "10. rl_allow c=1 in Sentinel mode beside standalone (5 interleaved slices)"
sentinel_case || exit 1
fi

# TLS against plain TCP: its own servers (a TLS port), its own ratios.
want tls && RL_BENCH_OUT=$OUT RL_BENCH_SECONDS=$SECS bash "$HERE/tls.sh"

if want redis_time; then
rl_stop_redis bench
rl_start_redis bench "$REDIS_PORT" "${REDIS_ARGS[@]}" || exit 1
redis_time
fi

echo
echo "Targets (ratios within this run)"
# A section left out (RL_BENCH_ONLY) leaves its figures unset; ratio and
# info leave out what has no figures.
set +u
ceil() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", 1 / (1 / a + 1 / b) }'; }
tcp_ceiling=$(ceil "${R[select1 c=1]}" "${R[hiredis sync tcp hot]}")
unix_ceiling=$(ceil "${R[select1 c=1]}" "${R[hiredis sync unix hot]}")
want c1 && echo "  round-trip ceiling c=1 = 1 / (1/SELECT-1 + 1/hiredis-sync): tcp $tcp_ceiling, unix $unix_ceiling calls/s"
ratio "rl_allow c=1 tcp / round-trip ceiling tcp (median of rounds)" "${R[c1 tcp]}" 1 0.9
ratio "rl_allow c=1 unix / round-trip ceiling unix (median of rounds)" "${R[c1 unix]}" 1 0.9
# The targets with default settings; the same ratios with every call a
# round trip (deny cache off) are printed beside them, not judged.
for tr in tcp unix; do
	if [ $tr = tcp ]; then
		rl8=${R[rl_allow token_bucket hot c=8 default]}
		off8=${R[rl_allow token_bucket hot c=8]}
	else
		rl8=${R[rl_allow token_bucket hot c=8 unix default]}
		off8=${R[rl_allow token_bucket hot c=8 unix]}
	fi
	if want c8; then
		# Section 3b: the median of the rounds' own ratios.
		k=rl
		[ $tr = unix ] && k=rlu
		ratio "rl_allow hot c=8 $tr / fw_logged function hot c=8 (rounds)" "${R[c8 $k fwl]}" 1 5
		ratio "rl_allow hot c=8 $tr / fw_unlogged function hot c=8 (rounds)" "${R[c8 $k fwu]}" 1 1.3
		ratio "rl_allow hot c=8 $tr / fw_unlogged statement hot c=8 (rounds)" "${R[c8 $k fwus]}" 1 1.3
	else
		ratio "rl_allow hot c=8 $tr / fw_logged function hot c=8" "$rl8" "${R[fw_logged-func hot c=8]}" 5
		ratio "rl_allow hot c=8 $tr / fw_unlogged function hot c=8" "$rl8" "${R[fw_unlogged-func hot c=8]}" 1.3
		ratio "rl_allow hot c=8 $tr / fw_unlogged statement hot c=8 (no function)" "$rl8" "${R[fw_unlogged-stmt hot c=8]}" 1.3
	fi
	info "rl_allow hot c=8 $tr, deny cache off / fw_logged function hot c=8" "$off8" "${R[fw_logged-func hot c=8]}"
	info "rl_allow hot c=8 $tr, deny cache off / fw_unlogged function hot c=8" "$off8" "${R[fw_unlogged-func hot c=8]}"
done
ratio "committed rl_allow, refunds on / refunds off, hot c=1 tcp" \
	"${R[rl_allow by policy, refunds on, committed, hot c=1 tcp]}" \
	"${R[rl_allow by policy, refunds off, hot c=1 tcp]}" 0.95
ratio "concurrency check + release / rl_allow, hot c=1 tcp" \
	"${R[concurrency check + release at commit, hot c=1 tcp]}" \
	"${R[rl_allow by policy hot c=1 tcp (beside concurrency)]}" 0.45
ratio "rl_allow_many tcp checks/s / hiredis pipe64 tcp" \
	"${R[rl_allow_many 1000 keys c=1 tcp]}" "${R[hiredis pipe64 tcp rand10000]}" 0.7
ratio "rl_allow_many 1000 keys / 1000 single rl_allow calls, tcp, standalone" \
	"${R[rl_allow_many 1000 keys c=1 tcp (beside single calls)]}" \
	"${R[1000 single rl_allow calls in one statement c=1 tcp]}" 5
info "rl_allow_layered two rules / rl_allow, hot c=1 tcp" \
	"${R[rl_allow_layered two rules hot c=1 tcp]}" "${R[rl_allow token_bucket hot c=1 tcp (beside layered)]}"
# <= 30 % added time: plain / with-trigger >= 1 / 1.3
ratio "INSERT time: plain / rl_throttle_statement, row + statement" \
	"${R[insert 100000 rows, no trigger]}" "${R[insert 100000 rows, rl_throttle_statement, row + statement]}" 0.77
info "INSERT time: plain / rl_throttle_statement, transition table" \
	"${R[insert 100000 rows, no trigger]}" "${R[insert 100000 rows, rl_throttle_statement, transition table]}"
info "INSERT time: plain / empty transition trigger (PostgreSQL's floor)" \
	"${R[insert 100000 rows, no trigger]}" "${R[insert 100000 rows, empty transition trigger]}"
info "COPY time: plain / rl_throttle_statement, transition table" \
	"${R[copy 100000 rows, no trigger]}" "${R[copy 100000 rows, rl_throttle_statement, transition table]}"
info "COPY time: plain / rl_throttle_statement, row + statement" \
	"${R[copy 100000 rows, no trigger]}" "${R[copy 100000 rows, rl_throttle_statement, row + statement]}"
ratio "rl_allow with Redis down / SELECT 1, c=1 (median of rounds)" "${R[down ratio]}" 1 0.8
ratio "rl_allow(key, policy) / rl_allow(key, algo, limit, window), hot c=1 tcp" \
	"${R[rl_allow by policy token_bucket hot c=1 tcp]}" \
	"${R[rl_allow token_bucket hot c=1 tcp (beside policy)]}" 0.97
stats_ratios
# The Redis Cluster cases (test/bench/cluster.sh, runnable alone); its
# rows and ratios go to the same results file.
if [ "${RL_BENCH_CLUSTER:-1}" = 1 ] && want cluster; then
	echo
	RL_BENCH_OUT=$OUT RL_BENCH_NO_SETUP=1 bash "$HERE/cluster.sh"
fi

ratio "rl_allow c=1 sentinel / standalone" \
	"${R[rl_allow token_bucket hot c=1 sentinel]}" \
	"${R[rl_allow token_bucket hot c=1 standalone (beside sentinel)]}" 0.95
if want local; then
echo
bench_local
fi
# The backend's instructions per check (callgrind): only when RL_BENCH_ONLY
# names instr, as the A/B of test/bench/ab.sh does.
if [[ " ${RL_BENCH_ONLY:-} " == *" instr "* ]]; then
	echo
	pair_turn
	RL_BENCH_OUT=$OUT RL_BENCH_NO_SETUP=1 bash "$HERE/instr.sh"
fi
echo
echo "results: $OUT"
