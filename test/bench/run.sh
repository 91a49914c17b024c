#!/bin/bash
#
# test/bench/run.sh
#
# The ratelimit benchmark: every case in one run, against throwaway Redis
# and PostgreSQL servers it starts itself, so that each target is a ratio
# of numbers measured side by side on the same machine.
#
#   bash test/bench/run.sh                       # RL_BENCH_SECONDS=5 per case
#   RL_BENCH_SECONDS=1 bash test/bench/run.sh    # a quick look
#
# Prints a table and the ratios against the targets, and writes both to
# test/bench/results/<time>.tsv (case, value, unit).

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/servers.sh"

SECS=${RL_BENCH_SECONDS:-5}
REDIS_PORT=${RL_BENCH_REDIS_PORT:-6381}
PG_PORT=${RL_BENCH_PG_PORT:-54381}
ALGOS="fixed_window sliding_log sliding_counter token_bucket leaky_bucket gcra"
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$HERE/results"
OUT=$HERE/results/$STAMP.tsv
declare -A R

rl_setup || exit 1
rl_start_redis bench "$REDIS_PORT" --maxmemory-policy noeviction || exit 1
# Default durability (fsync on) for the logged-table limiter.
rl_start_pg bench "$PG_PORT" "$REDIS_PORT" "fsync = on" "max_connections = 50" || exit 1
W=$RL_TMP/bench
mkdir -p "$W"
[ "$(id -u)" = 0 ] && chown postgres: "$W"

# record NAME VALUE UNIT
record() {
	R[$1]=$2
	printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$OUT"
	printf '  %-44s %12s %s\n' "$1" "$2" "$3"
}

# script NAME < text: a pgbench script file the postgres user can read.
script() {
	cat > "$W/$1.sql"
	chmod 644 "$W/$1.sql"
}

# pgbench_tps SCRIPT CLIENTS: TPS of a custom script, prepared statements.
pgbench_tps() {
	rl_as_owner "$RL_PGBIN/pgbench" -n -M prepared -h "$RL_TMP" -p "$PG_PORT" -U postgres \
		-c "$2" -j "$2" -T "$SECS" -f "$W/$1.sql" postgres 2> "$W/err" |
		awk '/^tps = .*without initial/ { printf "%.0f", $3 }'
}

keyname() {
	[ "$1" = 1 ] && echo hot || echo rand10000
}

echo "ratelimit benchmark $STAMP: $(nproc) cores, $SECS s per case"
printf 'case\tvalue\tunit\n' > "$OUT"

echo "1. Floors and ceilings"
script select1 <<< 'SELECT 1;'
for c in 1 8; do
	record "select1 c=$c" "$(pgbench_tps select1 $c)" tps
done
gcc -O2 -I"$RL_ROOT/src" -o "$W/hb" "$HERE/rl_hiredis_bench.c" -lhiredis || exit 1
record "hiredis sync hot" "$("$W/hb" "$REDIS_PORT" "$SECS" 1 1)" calls/s
record "hiredis sync rand10000" "$("$W/hb" "$REDIS_PORT" "$SECS" 1 10000)" calls/s
record "hiredis pipe64 rand10000" "$("$W/hb" "$REDIS_PORT" "$SECS" 64 10000)" calls/s
record "redis-benchmark ping c=1" "$(redis-benchmark -p "$REDIS_PORT" -t ping -c 1 \
	-n $((SECS * 15000)) --csv | awk -F'"' '/PING_MBULK/ { printf "%.0f", $4 }')" ops/s

echo "2. Table limiters written in SQL"
rl_psql bench -q <<'SQL'
CREATE TABLE fw_logged (key int PRIMARY KEY, win bigint NOT NULL, n int NOT NULL);
CREATE UNLOGGED TABLE fw_unlogged (LIKE fw_logged INCLUDING ALL);
CREATE UNLOGGED TABLE slog (key int NOT NULL, ts timestamptz NOT NULL);
CREATE INDEX ON slog (key, ts);
SQL
for keys in 1 10000; do
	for t in fw_logged fw_unlogged; do
		script "$t-$keys" <<-PGB
		\set k random(1, $keys)
		INSERT INTO $t AS t VALUES (:k, floor(extract(epoch FROM clock_timestamp()))::bigint, 1)
		ON CONFLICT (key) DO UPDATE
		   SET win = excluded.win, n = CASE WHEN t.win = excluded.win THEN t.n + 1 ELSE 1 END
		RETURNING n <= 100;
		PGB
	done
	script "slog-$keys" <<-PGB
	\set k random(1, $keys)
	BEGIN;
	DELETE FROM slog WHERE key = :k AND ts <= clock_timestamp() - interval '1 second';
	INSERT INTO slog SELECT :k, clock_timestamp()
	 WHERE (SELECT count(*) FROM slog WHERE key = :k) < 100;
	COMMIT;
	PGB
done
for t in fw_logged fw_unlogged slog; do
	for keys in 1 10000; do
		for c in 1 8; do
			record "$t $(keyname $keys) c=$c" "$(pgbench_tps "$t-$keys" $c)" tps
		done
	done
done

echo "3. rl_allow, every algorithm (limit 100 per second)"
for a in $ALGOS; do
	for keys in 1 10000; do
		script "$a-$keys" <<-PGB
		\set k random(1, $keys)
		SELECT allowed FROM rl_allow('k' || :k, '$a', 100, '1 second');
		PGB
		for c in 1 8; do
			record "rl_allow $a $(keyname $keys) c=$c" "$(pgbench_tps "$a-$keys" $c)" tps
		done
	done
done

echo "4. rl_allow_many, 1000 keys per call"
if rl_psql bench -qAt -c "SELECT 1 FROM pg_proc WHERE proname = 'rl_allow_many'" | grep -q 1; then
	rl_psql bench -q -c "CREATE TABLE keys1000 AS
		SELECT array_agg('m' || g) AS keys FROM generate_series(1, 1000) g"
	script many <<-'PGB'
	SELECT count(*) FROM keys1000, LATERAL rl_allow_many(keys1000.keys, 'token_bucket', 100, '1 second');
	PGB
	record "rl_allow_many 1000 keys c=1" "$(($(pgbench_tps many 1) * 1000))" checks/s
else
	echo "  (rl_allow_many not built; skipped)"
fi

echo "5. 100 000-row INSERT: no trigger, row trigger, statement trigger"
if rl_psql bench -qAt -c "SELECT 1 FROM pg_proc WHERE proname = 'rl_throttle_statement'" | grep -q 1; then
	rl_psql bench -q <<-'SQL'
	CREATE UNLOGGED TABLE ins_plain (id int, author int);
	CREATE UNLOGGED TABLE ins_row (LIKE ins_plain);
	CREATE UNLOGGED TABLE ins_stmt (LIKE ins_plain);
	CREATE TRIGGER t BEFORE INSERT ON ins_row FOR EACH ROW
		EXECUTE FUNCTION rl_throttle('author', 'token_bucket', '1000000', '1 hour');
	CREATE TRIGGER t AFTER INSERT ON ins_stmt REFERENCING NEW TABLE AS rl_new
		FOR EACH STATEMENT
		EXECUTE FUNCTION rl_throttle_statement('author', 'token_bucket', '1000000', '1 hour');
	SQL
	for t in ins_plain ins_row ins_stmt; do
		ms=$(rl_psql bench -qAt <<-SQL
		TRUNCATE $t;
		CREATE TEMP TABLE t0 AS SELECT clock_timestamp() AS t;
		INSERT INTO $t SELECT g, g % 1000 FROM generate_series(1, 100000) g;
		SELECT round(extract(epoch FROM clock_timestamp() - t) * 1000) FROM t0;
		SQL
		)
		record "insert 100000 rows $t" "$ms" ms
	done
else
	echo "  (triggers not built; skipped)"
fi

echo "6. Redis down, failure_mode open"
script down <<< "SELECT allowed FROM rl_allow('down', 'gcra', 100, '1 second');"
rl_stop_redis bench
record "rl_allow redis down c=1" "$(pgbench_tps down 1)" tps
record "select1 c=1 beside the down case" "$(pgbench_tps select1 1)" tps
rl_start_redis bench "$REDIS_PORT" --maxmemory-policy noeviction || exit 1

echo "7. Memory per key (MEMORY USAGE)"
for a in $ALGOS; do
	rl_psql bench -qAt -c "SELECT allowed FROM rl_allow('mem', '$a', 100000, '1 hour')" >/dev/null
	k=$(redis-cli -p "$REDIS_PORT" --scan --pattern "rl:{*:mem}:$a")
	record "memory $a, 1 unit" "$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "$k")" bytes
done
rl_psql bench -qAt -c "SELECT count((rl_allow('mem', 'sliding_log', 100000, '1 hour')).allowed)
	FROM generate_series(1, 999)" >/dev/null
k=$(redis-cli -p "$REDIS_PORT" --scan --pattern "rl:{*:mem}:sliding_log")
record "memory sliding_log, 1000 units" "$(redis-cli -p "$REDIS_PORT" MEMORY USAGE "$k")" bytes

echo
echo "Targets (ratios within this run)"
# ratio LABEL NUMERATOR DENOMINATOR TARGET: met when NUMERATOR / DENOMINATOR >= TARGET.
ratio() {
	awk -v l="$1" -v n="$2" -v d="$3" -v t="$4" -v out="$OUT" 'BEGIN {
		r = (d > 0) ? n / d : 0
		v = (r >= t) ? "met" : "MISSED"
		printf "  %-58s %6.2f  (target >= %s)  %s\n", l, r, t, v
		printf "ratio %s\t%.3f\t%s\n", l, r, v >> out
	}'
}
ceiling=$(awk -v a="${R[select1 c=1]}" -v b="${R[hiredis sync hot]}" \
	'BEGIN { printf "%.0f", 1 / (1 / a + 1 / b) }')
echo "  round-trip ceiling for c=1 = 1 / (1/SELECT-1 + 1/hiredis-sync) = $ceiling calls/s"
ratio "rl_allow token_bucket hot c=1 / round-trip ceiling" \
	"${R[rl_allow token_bucket hot c=1]}" "$ceiling" 0.9
ratio "rl_allow token_bucket hot c=8 / fw_logged hot c=8" \
	"${R[rl_allow token_bucket hot c=8]}" "${R[fw_logged hot c=8]}" 5
ratio "rl_allow token_bucket hot c=8 / fw_unlogged hot c=8" \
	"${R[rl_allow token_bucket hot c=8]}" "${R[fw_unlogged hot c=8]}" 1.3
if [ -n "${R[rl_allow_many 1000 keys c=1]:-}" ]; then
	ratio "rl_allow_many checks/s / hiredis pipe64 rand10000" \
		"${R[rl_allow_many 1000 keys c=1]}" "${R[hiredis pipe64 rand10000]}" 0.7
fi
if [ -n "${R[insert 100000 rows ins_stmt]:-}" ]; then
	# <= 30 % added time is plain / with-trigger >= 1 / 1.3
	ratio "plain INSERT time / statement-trigger INSERT time" \
		"${R[insert 100000 rows ins_plain]}" "${R[insert 100000 rows ins_stmt]}" 0.77
fi
ratio "rl_allow with Redis down / SELECT 1, c=1" \
	"${R[rl_allow redis down c=1]}" "${R[select1 c=1 beside the down case]}" 0.8
echo
echo "results: $OUT"
