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
#      how the same session recovers when it comes back.
#
# With no redis-server installed (or RL_DEMO_ENGINE=local) it runs on the
# local engine (ratelimit.engine = local, this server's shared memory)
# and leaves out part 3.
#
# Everything it started is stopped when it ends.

set -u
source "$(dirname "$0")/lib/servers.sh"

# Redis on the first free loopback port from 16379 on (RL_DEMO_REDIS_PORT
# names one); PostgreSQL listens only on a socket in its own directory.
REDIS_PORT=${RL_DEMO_REDIS_PORT:-$(rl_free_port 16379)} || exit 1
PG_PORT=${RL_DEMO_PG_PORT:-54379}
ALGOS="'fixed_window','sliding_log','sliding_counter','token_bucket','leaky_bucket','gcra'"

# Headings in bold on a terminal, plain text into a file or a pipe.
if [ -t 1 ]; then
	say() { printf '\n\033[1m%s\033[0m\n' "$*"; }
else
	say() { printf '\n%s\n' "$*"; }
fi
sql() { rl_psql demo -q -P footer=off "$@"; }

say "Setting up (packages, build, throwaway servers)..."
rl_setup || exit 1
ENGINE=${RL_DEMO_ENGINE:-redis}
command -v redis-server >/dev/null || ENGINE=local
if [ "$ENGINE" = local ]; then
	rl_start_pg demo "$PG_PORT" 1 "ratelimit.engine = local" || exit 1
	echo "No Redis: the local engine (ratelimit.engine = local); PostgreSQL on port $PG_PORT (socket in $RL_TMP)"
else
	rl_start_redis demo "$REDIS_PORT" || exit 1
	rl_start_pg demo "$PG_PORT" "$REDIS_PORT" || exit 1
	echo "Redis on 127.0.0.1:$REDIS_PORT, PostgreSQL on port $PG_PORT (socket in $RL_TMP)"
fi

say "One call:  SELECT * FROM rl_allow('user:42', 'sliding_log', 100, '1 minute');"
sql -c "SELECT * FROM rl_allow('user:42', 'sliding_log', 100, '1 minute')"

# --- 1. The boundary burst --------------------------------------------------
say "1. The boundary burst: limit 10 per 2 s, 10 calls just before a window edge and 10 just after"
# Wait until Redis's clock (the local engine's: this machine's) is 1.85 s
# into a 2-second window (epoch aligned).
while :; do
	if [ "$ENGINE" = local ]; then
		read -r s us < <(date '+%s %N' | awk '{ printf "%d %d", $1, $2 / 1000 }')
	else
		read -r s us < <(redis-cli -p "$REDIS_PORT" TIME | tr '\n' ' ')
	fi
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
# One session sees Redis go and come back: it waits (\! polls a file)
# while this script restarts Redis, then shows the reconnect.
if [ "$ENGINE" = local ]; then
	say "Done (part 3, Redis going away, needs Redis). Servers stopped."
	exit 0
fi
say "3. Redis goes away: the failure policy answers at once"
rl_stop_redis demo
down=$RL_TMP/session-saw-it-down
back=$RL_TMP/redis-is-back
sql -f - <<EOF &
CREATE TEMP TABLE t0 AS SELECT clock_timestamp() AS t;
SET client_min_messages = error;
SELECT 'open (default)' AS failure_mode, r.*,
       round(extract(epoch FROM clock_timestamp() - (SELECT t FROM t0)) * 1000, 1) AS ms
  FROM rl_allow('user:42', 'gcra', 100, '1 minute') r;
CREATE TEMP TABLE t1 AS SELECT clock_timestamp() AS t;
SELECT count(*) FILTER (WHERE (rl_allow('user:42', 'gcra', 100, '1 minute')).allowed)
         AS "allowed of 10000 calls while down",
       round(extract(epoch FROM clock_timestamp() - (SELECT t FROM t1)) * 1000000 / 10000, 1)
         AS "us per call"
  FROM generate_series(1, 10000);
SET ratelimit.failure_mode = closed;
SELECT 'closed' AS failure_mode, r.* FROM rl_allow('user:42', 'gcra', 100, '1 minute') r;
SELECT connected, last_error, fail_open, fail_closed, failures FROM rl_status();
\! touch $down; while [ ! -f $back ]; do sleep 0.1; done
\echo
\echo 'Redis is back: the same session reconnects at its first call after ratelimit.retry_interval (1 s)'
SELECT pg_sleep(1.1) IS NOT NULL AS "waited 1.1 s";
SELECT * FROM rl_allow('user:42', 'gcra', 100, '1 minute');
SELECT connected, server_version, connects, failures FROM rl_status();
EOF
session=$!
while [ ! -f "$down" ] && kill -0 "$session" 2>/dev/null; do
	sleep 0.1
done
rl_start_redis demo "$REDIS_PORT" || exit 1
rl_as_owner touch "$back"
wait "$session" || exit 1

say "Done. Servers stopped."
