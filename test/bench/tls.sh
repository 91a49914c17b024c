#!/bin/bash
#
# test/bench/tls.sh
#
# TLS against plain TCP, side by side: rl_allow (token_bucket, one hot
# key, deny cache off, so every call is a Redis round trip) at c=1 and
# c=8 over each, in interleaved slices, and the cost of one connection
# (connect, handshake, AUTH/INFO round trip and one call), measured by
# forcing a reconnect per call.  One redis-server serves both: a plain
# port and a TLS port with a certificate made here (RSA 2048, as managed
# services commonly use).  run.sh runs it as its section 10; alone:
#
#   bash test/bench/tls.sh                       # RL_BENCH_SECONDS=6 per case
#
# Results go to stdout and, when RL_BENCH_OUT names a file, are appended
# to it (case, value, unit) as run.sh's are.

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/servers.sh"

SECS=${RL_BENCH_SECONDS:-6}
PLAIN_PORT=${RL_BENCH_TLS_PLAIN_PORT:-6383}
TLS_PORT=${RL_BENCH_TLS_PORT:-6384}
PG_PORT=${RL_BENCH_TLS_PG_PORT:-54383}
OUT=${RL_BENCH_OUT:-/dev/null}
declare -A R

rl_setup || exit 1
rl_tmp_init
C=$RL_TMP/tls-certs
mkdir -p "$C"
ossl() { openssl "$@" >/dev/null 2>&1 || { echo "openssl $1 failed" >&2; exit 1; }; }
ossl req -x509 -newkey rsa:2048 -nodes -keyout "$C/ca.key" -out "$C/ca.crt" -days 2 \
	-subj "/CN=ratelimit bench CA"
ossl req -newkey rsa:2048 -nodes -keyout "$C/server.key" -out "$C/server.csr" \
	-subj "/CN=ratelimit bench server"
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$C/server.ext"
ossl x509 -req -in "$C/server.csr" -CA "$C/ca.crt" -CAkey "$C/ca.key" -CAcreateserial \
	-days 2 -out "$C/server.crt" -extfile "$C/server.ext"
chmod 644 "$C"/*
[ "$(id -u)" = 0 ] && chown -R postgres: "$C"

rl_start_redis benchtls "$PLAIN_PORT" --tls-port "$TLS_PORT" \
	--tls-cert-file "$C/server.crt" --tls-key-file "$C/server.key" \
	--tls-ca-cert-file "$C/ca.crt" --tls-auth-clients no || exit 1
rl_start_pg benchtls "$PG_PORT" "$PLAIN_PORT" "max_connections = 50" \
	"ratelimit.redis_tls_ca_file = '$C/ca.crt'" || exit 1
W=$RL_TMP/bench-tls
mkdir -p "$W"
[ "$(id -u)" = 0 ] && chown postgres: "$W"

record() {
	R[$1]=$2
	printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$OUT"
	printf '  %-52s %10s %s\n' "$1" "$2" "$3"
}
median() {
	sort -n | awk '{ v[NR] = $1 } END {
		if (NR == 0) { print 0; exit }
		printf "%.0f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
m() { echo "$1" | tr ' ' '\n' | grep . | median; }
# tps CLIENTS SECONDS PGOPTIONS: median TPS of the hot-key call.
tps() {
	rl_as_owner env PGOPTIONS="$3" "$RL_PGBIN/pgbench" -n -M prepared -P 1 \
		-h "$RL_TMP" -p "$PG_PORT" -U postgres -c "$1" -j "$1" -T "$2" \
		-f "$W/hot.sql" postgres 2>&1 >/dev/null |
		awk '/^progress: / { v[++n] = $4 }
		     END { for (i = (n >= 3) ? 2 : 1; i <= n; i++) print v[i] }' | median
}
echo "SELECT allowed FROM rl_allow('hot', 'token_bucket', 100, '1 second');" > "$W/hot.sql"
chmod 644 "$W/hot.sql"

OFF="-c ratelimit.deny_cache=off"
TLS="$OFF -c ratelimit.redis_tls=on -c ratelimit.redis_port=$TLS_PORT"
echo "10. TLS: rl_allow over TLS and plain TCP (interleaved slices), and one connection's cost"
rl_psql benchtls -qAt -c "SET ratelimit.redis_tls = on" -c "SET ratelimit.redis_port = $TLS_PORT" \
	-c "SET ratelimit.failure_mode = error" \
	-c "SELECT allowed FROM rl_allow('hot', 'token_bucket', 100, '1 second')" >/dev/null ||
	{ echo "TLS connection failed" >&2; exit 1; }
# What the server negotiates with OpenSSL's default lists, which the
# extension's client uses too (for the README's table).
echo "   negotiated: $(openssl s_client -connect "127.0.0.1:$TLS_PORT" -CAfile "$C/ca.crt" \
	-brief </dev/null 2>&1 | awk -F': ' '/^(Protocol version|Ciphersuite)/ { printf "%s ", $2 }')"
slice=$(( (SECS + 2) / 3 + 1 ))
declare -A S
for c in 1 8; do
	for _ in 1 2 3; do
		S[plain$c]+="$(tps $c "$slice" "$OFF") "
		S[tls$c]+="$(tps $c "$slice" "$TLS") "
	done
	record "rl_allow token_bucket hot c=$c tcp" "$(m "${S[plain$c]}")" tps
	record "rl_allow token_bucket hot c=$c tls" "$(m "${S[tls$c]}")" tps
done

# A reconnect per call: each call changes a setting of the connection's
# signature (the server name, both valid), so the backend drops its link
# and connects again; over TLS that includes a new SSL_CTX (the CA file
# read) and the handshake.  Milliseconds per call, median of 5 runs.
N=200
# per_call TLS(on|off) PORT: ms per reconnecting call.
per_call() {
	rl_psql benchtls -qAt <<-SQL
	SET ratelimit.redis_tls = $1;
	SET ratelimit.redis_port = $2;
	SET ratelimit.failure_mode = error;
	CREATE TEMP TABLE t0 AS SELECT clock_timestamp() AS t;
	DO \$\$
	BEGIN
		FOR i IN 1..$N LOOP
			PERFORM set_config('ratelimit.redis_tls_server_name',
							   CASE WHEN i % 2 = 0 THEN 'localhost' ELSE '127.0.0.1' END, false);
			PERFORM rl_allow('conn', 'token_bucket', 1000000, '1 second');
		END LOOP;
	END \$\$;
	SELECT round((extract(epoch FROM clock_timestamp() - t) * 1000 / $N)::numeric, 3) FROM t0;
	SQL
}
declare -A K
for _ in 1 2 3 4 5; do
	K[plain]+="$(per_call off "$PLAIN_PORT") "
	K[tls]+="$(per_call on "$TLS_PORT") "
done
mf() { echo "$1" | tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
record "connect + first call, tcp" "$(mf "${K[plain]}")" ms
record "connect + first call, tls" "$(mf "${K[tls]}")" ms
echo
awk -v a="${R[rl_allow token_bucket hot c=1 tls]}" -v b="${R[rl_allow token_bucket hot c=1 tcp]}" \
	-v c="${R[rl_allow token_bucket hot c=8 tls]}" -v d="${R[rl_allow token_bucket hot c=8 tcp]}" \
	-v e="${R[connect + first call, tls]}" -v f="${R[connect + first call, tcp]}" -v out="$OUT" 'BEGIN {
	r1 = (b > 0) ? a / b : 0; r8 = (d > 0) ? c / d : 0
	printf "  %-66s %6.2f  (>= 0.8)  %s\n", "rl_allow c=1 tls / tcp", r1, (r1 >= 0.8) ? "met" : "MISSED"
	printf "  %-66s %6.2f  (for comparison)\n", "rl_allow c=8 tls / tcp", r8
	printf "  %-66s %6.2f ms\n", "one TLS connect, beyond a plain one", e - f
	printf "ratio rl_allow c=1 tls / tcp\t%.3f\t%s\n", r1, (r1 >= 0.8) ? "met" : "MISSED" >> out
	printf "ratio rl_allow c=8 tls / tcp\t%.3f\tinfo\n", r8 >> out
	printf "tls connect beyond tcp\t%.3f\tms\n", e - f >> out
}'
