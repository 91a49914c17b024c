#!/bin/bash
#
# test/bench/cluster.sh
#
# The Redis Cluster cases of the benchmark (issue 12), runnable alone
# (test/bench/run.sh runs it last):
#
#   bash test/bench/cluster.sh                     # RL_BENCH_SECONDS=6 per case
#   RL_BENCH_CLUSTER_CASES=split bash test/bench/cluster.sh   # only the per-master split
#
# Against throwaway servers it starts: a standalone Redis, a one-master
# cluster (one node owning every slot) and a three-master cluster (no
# replicas), all on loopback, with one PostgreSQL pointed at each in turn
# through PGOPTIONS.  Ratios only, measured side by side in one run:
#   - rl_allow c=1, one-master cluster / standalone (target >= 0.95):
#     routing must cost nothing measurable;
#   - rl_allow_many of 1000 keys, three masters / one master (>= 1.0):
#     every master's pipeline is written before any is waited for;
#   - per-master work for 3000 random keys (INFO commandstats), as
#     measured; the capacity it projects is labelled a projection.
# On 2 shared cores PostgreSQL, pgbench and every Redis share the CPUs, so
# no aggregate throughput here is presented as scaling.  Appends to the
# results file named by RL_BENCH_OUT, or writes its own.

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/servers.sh"

SECS=${RL_BENCH_SECONDS:-6}
CASES=${RL_BENCH_CLUSTER_CASES:-ratios split}
BASE=${RL_BENCH_CLUSTER_PORT:-6391}
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$HERE/results"
OUT=${RL_BENCH_OUT:-$HERE/results/cluster-$STAMP.tsv}
[ -f "$OUT" ] || printf 'case\tvalue\tunit\n' > "$OUT"
declare -A R

[ "${RL_BENCH_NO_SETUP:-0}" = 1 ] || rl_setup || exit 1
rl_tmp_init
SA=$BASE                   # standalone
ONE=$((BASE + 1))          # one-master cluster
THREE=$((BASE + 2))        # three masters: BASE+2 .. BASE+4
PG=${RL_BENCH_CLUSTER_PG_PORT:-54391}
for p in $SA $ONE $THREE $((THREE + 1)) $((THREE + 2)); do
	rl_port_free "$p" && rl_port_free $((p + 10)) ||
		{ echo "port $p or $((p + 10)) is taken" >&2; exit 1; }
done

rl_start_redis c-sa "$SA" || exit 1
# Bus ports data + 10, so the block stays small and known.
cluster_node() {
	rl_start_redis "c-$1" "$1" --cluster-enabled yes --cluster-port $(($1 + 10)) \
		--cluster-config-file nodes.conf --cluster-node-timeout 1000
}
cluster_ok() {
	for _ in $(seq 100); do
		redis-cli -p "$1" CLUSTER INFO | grep -q 'cluster_state:ok' && return 0
		sleep 0.1
	done
	echo "cluster at $1 not ok" >&2
	return 1
}
cluster_node "$ONE" || exit 1
redis-cli -p "$ONE" CLUSTER ADDSLOTSRANGE 0 16383 >/dev/null
cluster_ok "$ONE" || exit 1
for p in $THREE $((THREE + 1)) $((THREE + 2)); do cluster_node "$p" || exit 1; done
redis-cli --cluster create 127.0.0.1:$THREE 127.0.0.1:$((THREE + 1)) 127.0.0.1:$((THREE + 2)) \
	--cluster-replicas 0 --cluster-yes >/dev/null || exit 1
for p in $THREE $((THREE + 1)) $((THREE + 2)); do cluster_ok "$p" || exit 1; done

rl_start_pg cbench "$PG" "$SA" "max_connections = 20" || exit 1
W=$RL_TMP/cbench
mkdir -p "$W"
[ "$(id -u)" = 0 ] && chown postgres: "$W"

OFF="-c ratelimit.deny_cache=off"
C1="$OFF -c ratelimit.redis_mode=cluster -c ratelimit.redis_nodes=127.0.0.1:$ONE"
C3="$OFF -c ratelimit.redis_mode=cluster -c ratelimit.redis_nodes=127.0.0.1:$THREE"

record() {
	R[$1]=$2
	printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$OUT"
	printf '  %-60s %10s %s\n' "$1" "$2" "$3"
}
median() {
	sort -n | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print 0; exit }
		printf "%.0f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
m() { echo "$1" | tr ' ' '\n' | grep . | median; }
script() {
	cat > "$W/$1.sql"
	chmod 644 "$W/$1.sql"
}
# tps SCRIPT CLIENTS SECONDS PGOPTIONS: median of the one-second reports.
tps() {
	rl_as_owner env PGOPTIONS="$4" "$RL_PGBIN/pgbench" -n -M prepared -P 1 \
		-h "$RL_TMP" -p "$PG" -U postgres -c "$2" -j "$2" -T "$3" \
		-f "$W/$1.sql" postgres 2>&1 >/dev/null |
		awk '/^progress: / { v[++n] = $4 }
		     END { for (i = (n >= 3) ? 2 : 1; i <= n; i++) print v[i] }' | median
}
ratio() {
	awk -v l="$1" -v n="$2" -v d="$3" -v t="$4" -v out="$OUT" 'BEGIN {
		r = (d > 0) ? n / d : 0
		v = (r >= t) ? "met" : "MISSED"
		printf "  %-66s %6.2f  (>= %s)  %s\n", l, r, t, v
		printf "ratio %s\t%.3f\t%s\n", l, r, v >> out
	}'
}

echo "Redis Cluster cases, $SECS s per case ($(nproc) cores; the servers share them)"
script tb-hot <<< "SELECT allowed FROM rl_allow('hot', 'token_bucket', 100, '1 second');"
# 1000 distinct keys per call, fresh each time (they expire within 2 s).
script many <<< "SELECT count(*) FROM rl_allow_many(ARRAY(SELECT 'm' || g || ':' || random() FROM generate_series(1, 1000) g), 'fixed_window', 10, '1 second');"

# rl_allow c=1: standalone and a one-master cluster, five interleaved
# slices each, so drift on a shared machine hits both alike.
slice=$(( (SECS + 2) / 3 + 1 ))
declare -A S
case " $CASES " in *" ratios "*) ;; *) slice=0 ;; esac
for _ in 1 2 3 4 5; do
	[ "$slice" = 0 ] && break
	S[sa]+="$(tps tb-hot 1 "$slice" "$OFF") "
	S[c1]+="$(tps tb-hot 1 "$slice" "$C1") "
	S[many1]+="$(tps many 1 "$slice" "$C1") "
	S[many3]+="$(tps many 1 "$slice" "$C3") "
done
if [ "$slice" != 0 ]; then
	record "rl_allow token_bucket hot c=1 standalone" "$(m "${S[sa]}")" tps
	record "rl_allow token_bucket hot c=1 one-master cluster" "$(m "${S[c1]}")" tps
	record "rl_allow_many 1000 keys c=1 one master" "$(( $(m "${S[many1]}") * 1000 ))" checks/s
	record "rl_allow_many 1000 keys c=1 three masters" "$(( $(m "${S[many3]}") * 1000 ))" checks/s
fi

# Per-master work for 3000 random keys (one rl_allow each), measured.
case " $CASES " in *" split "*)
for p in $THREE $((THREE + 1)) $((THREE + 2)); do redis-cli -p "$p" CONFIG RESETSTAT >/dev/null; done
rl_as_owner env PGOPTIONS="$C3" "$RL_PGBIN/psql" -X -q -h "$RL_TMP" -p "$PG" -U postgres -d postgres \
	-c "SELECT count(*) FROM generate_series(1, 3000) g, rl_allow('w' || g || ':' || random(), 'fixed_window', 10, '1 hour')" >/dev/null
proj=0
split=""
for p in $THREE $((THREE + 1)) $((THREE + 2)); do
	# FCALL on Redis 7.0 and later, EVALSHA before.
	line=$(redis-cli -p "$p" INFO commandstats | tr -d '\r' | grep -E '^cmdstat_(fcall|evalsha):' | head -1)
	calls=$(echo "$line" | sed 's/^cmdstat_[a-z]*:calls=\([0-9]*\),.*/\1/')
	usec=$(echo "$line" | sed 's/.*,usec_per_call=\([0-9.]*\).*/\1/')
	record "measured: calls on master $p for 3000 random keys" "$calls" calls
	record "measured: usec_per_call on master $p" "$usec" us
	split="$split${split:+ / }$calls"
	proj=$(awk -v a="$proj" -v u="$usec" 'BEGIN { printf "%.0f", a + (u > 0 ? 1e6 / u : 0) }')
done
record "projection: script capacity, one core per master (sum of 1e6/usec_per_call)" "$proj" calls/s
echo "  measured split of 3000 random keys over the three masters: $split"
;; esac

echo
[ "$slice" = 0 ] && { echo "results: $OUT"; exit 0; }
echo "Cluster targets (ratios within this run)"
ratio "rl_allow c=1: one-master cluster / standalone" \
	"${R[rl_allow token_bucket hot c=1 one-master cluster]}" "${R[rl_allow token_bucket hot c=1 standalone]}" 0.95
ratio "rl_allow_many 1000 keys: three masters / one master" \
	"${R[rl_allow_many 1000 keys c=1 three masters]}" "${R[rl_allow_many 1000 keys c=1 one master]}" 1.0
echo "results: $OUT"
