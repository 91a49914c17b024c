#!/bin/bash
#
# test/demo.sh
#
# The ratelimit demo.  On a fresh Debian 12 machine (as root) it installs
# what is missing, builds the extension, starts a throwaway Redis and
# PostgreSQL on loopback, and shows three things in plain tables:
#
#   1. the boundary burst: a fixed window lets 2 x limit through across a
#      window edge, the other five algorithms do not;
#   2. 3000 requests from 20 concurrent sessions against a limit of 10:
#      exactly 10 allowed, for every algorithm;
#   3. what callers get when Redis goes away (fail open by default), and
#      how the limiter recovers when it comes back.
#
# Everything it started is stopped when it ends.

set -u
source "$(dirname "$0")/lib/servers.sh"

REDIS_PORT=${RL_DEMO_REDIS_PORT:-6379}
PG_PORT=${RL_DEMO_PG_PORT:-54379}
ALGOS="'fixed_window','sliding_log','sliding_counter','token_bucket','leaky_bucket','gcra'"

say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
sql() { rl_psql demo -q -P footer=off "$@"; }

say "Setting up (packages, build, throwaway servers)..."
rl_setup || exit 1
if redis-cli -p "$REDIS_PORT" PING >/dev/null 2>&1; then
	REDIS_PORT=$((REDIS_PORT + 10000))
fi
rl_start_redis demo "$REDIS_PORT" || exit 1
rl_start_pg demo "$PG_PORT" "$REDIS_PORT" || exit 1
echo "Redis on 127.0.0.1:$REDIS_PORT, PostgreSQL on port $PG_PORT (socket in $RL_TMP)"

say "One call:  SELECT * FROM rl_allow('user:42', 'sliding_log', 100, '1 minute');"
sql -c "SELECT * FROM rl_allow('user:42', 'sliding_log', 100, '1 minute')"

# --- 1. The boundary burst --------------------------------------------------
say "1. The boundary burst: limit 10 per 2 s, 10 calls just before a window edge and 10 just after"
# Wait until Redis's clock is 1.85 s into a 2-second window (epoch aligned).
while :; do
	read -r s us < <(redis-cli -p "$REDIS_PORT" TIME | tr '\n' ' ')
	pos=$(( (s % 2) * 1000000 + us ))
	[ "$pos" -ge 1850000 ] && [ "$pos" -lt 1900000 ] && break
	if [ "$pos" -lt 1800000 ]; then
		sleep "0.$(printf '%06d' $(( (1800000 - pos) % 1000000 )))"
	fi
done
# rl_allow in the select list runs once per row; see README, "Calling it".
burst() {
	echo "INSERT INTO burst SELECT a, '$1', (rl_allow('burst:' || a, a, 10, '2 seconds')).allowed
	        FROM unnest(ARRAY[$ALGOS]) a, generate_series(1, 10)"
}
sql -c "CREATE TEMP TABLE burst(algo text, phase text, allowed bool)" \
	-c "$(burst before)" -c "DO \$\$BEGIN PERFORM pg_sleep(0.2); END\$\$" -c "$(burst after)" \
	-c "SELECT algo AS algorithm,
	           count(*) FILTER (WHERE allowed AND phase = 'before') AS \"allowed before edge\",
	           count(*) FILTER (WHERE allowed AND phase = 'after') AS \"allowed after edge\",
	           count(*) FILTER (WHERE allowed) AS \"allowed within 0.2 s\",
	           CASE algo
	             WHEN 'fixed_window' THEN '2 x limit at an edge (by definition)'
	             WHEN 'sliding_log' THEN 'never more than 10 in any 2 s'
	             WHEN 'sliding_counter' THEN 'about 10 in any 2 s (weighted estimate)'
	             ELSE '10 burst + refill of 10 per 2 s'
	           END AS promise
	      FROM burst GROUP BY algo
	     ORDER BY array_position(ARRAY[$ALGOS], algo)"

# --- 2. Concurrency ---------------------------------------------------------
say "2. 3000 requests from 20 concurrent sessions (pgbench) on one key, limit 10 per hour"
sql -c "CREATE UNLOGGED TABLE hits(algo text, allowed bool, remaining bigint)"
for a in fixed_window sliding_log sliding_counter token_bucket leaky_bucket gcra; do
	echo "INSERT INTO hits SELECT '$a', allowed, remaining FROM rl_allow('hot:$a', '$a', 10, '1 hour');" \
		> "$RL_TMP/$a.sql"
	chmod 644 "$RL_TMP/$a.sql"
	rl_as_owner "$RL_PGBIN/pgbench" -n -h "$RL_TMP" -p "$PG_PORT" -U postgres \
		-c 20 -j 4 -t 150 -f "$RL_TMP/$a.sql" postgres > "$RL_TMP/$a.out" 2>&1
	errors=$(grep -c 'error' "$RL_TMP/$a.out")
	sql -c "INSERT INTO hits SELECT '$a', NULL, $errors" 
done
sql -c "SELECT algo AS algorithm,
	           count(allowed) AS requests,
	           count(*) FILTER (WHERE allowed) AS allowed,
	           count(*) FILTER (WHERE NOT allowed) AS denied,
	           count(DISTINCT remaining) FILTER (WHERE allowed) AS \"distinct remaining values\",
	           max(remaining) FILTER (WHERE allowed IS NULL) AS \"pgbench errors\"
	      FROM hits GROUP BY algo
	     ORDER BY array_position(ARRAY[$ALGOS], algo)"

# --- 3. Redis goes away -----------------------------------------------------
say "3. Redis goes away: the failure policy answers at once"
rl_stop_redis demo
sql -c "CREATE TEMP TABLE t0 AS SELECT clock_timestamp() AS t" \
	-c "SET client_min_messages = error" \
	-c "SELECT 'open (default)' AS failure_mode, r.*,
	           round(extract(epoch FROM clock_timestamp() - (SELECT t FROM t0)) * 1000, 1) AS ms
	      FROM rl_allow('user:42', 'gcra', 100, '1 minute') r" \
	-c "CREATE TEMP TABLE t1 AS SELECT clock_timestamp() AS t" \
	-c "SELECT count(*) FILTER (WHERE (rl_allow('user:42', 'gcra', 100, '1 minute')).allowed)
	             AS \"allowed of 10000 calls while down\",
	           round(extract(epoch FROM clock_timestamp() - (SELECT t FROM t1)) * 1000000 / 10000, 1)
	             AS \"us per call\"
	      FROM generate_series(1, 10000)" \
	-c "SET ratelimit.failure_mode = closed" \
	-c "SELECT 'closed' AS failure_mode, r.* FROM rl_allow('user:42', 'gcra', 100, '1 minute') r" \
	-c "SELECT connected, last_error, fail_open, fail_closed, failures FROM rl_status()"
say "Redis is back: the next call after ratelimit.retry_interval (1 s) reconnects"
rl_start_redis demo "$REDIS_PORT" || exit 1
sql -c "DO \$\$BEGIN PERFORM pg_sleep(1.1); END\$\$" \
	-c "SELECT * FROM rl_allow('user:42', 'gcra', 100, '1 minute')" \
	-c "SELECT connected, server_version, connects FROM rl_status()"

say "Done. Servers stopped."
