--
-- ping: rl_ping(), the verification step.  It connects now and has each
-- server answer: one row standalone, one per master in the cluster pass
-- (three).  Nothing printed depends on a port, a version or a round trip.
--

-- The SQL surface: its columns; pg_monitor may call it, PUBLIC may not.
SELECT 'rl_ping()'::regprocedure AS function, proretset,
	   pg_get_function_result(oid) AS result
FROM pg_proc WHERE oid = 'rl_ping()'::regprocedure;
SELECT has_function_privilege('public', 'rl_ping()', 'EXECUTE') AS public,
	   has_function_privilege('pg_monitor', 'rl_ping()', 'EXECUTE') AS pg_monitor;

-- Every server answered: its endpoint (the server of the settings, or
-- each master of the seed list), its product and version, a round trip.
SELECT count(*) = CASE current_setting('ratelimit.redis_mode')
					  WHEN 'cluster' THEN 3 ELSE 1 END AS rows_ok,
	   bool_and(engine = 'redis') AS engine_ok,
	   bool_and(mode = current_setting('ratelimit.redis_mode')) AS mode_ok,
	   bool_and(CASE mode
					WHEN 'cluster' THEN
						position(endpoint IN current_setting('ratelimit.redis_nodes')) > 0
					ELSE endpoint = '127.0.0.1:' || current_setting('ratelimit.redis_port')
				END) AS endpoint_ok,
	   count(DISTINCT endpoint) = count(*) AS endpoints_distinct,
	   bool_and(server IN ('redis', 'valkey')) AS server_ok,
	   bool_and(version ~ '^[0-9]+\.[0-9]+\.[0-9]+') AS version_ok,
	   bool_and(rtt_ms >= 0 AND rtt_ms < 10000) AS rtt_ok
FROM rl_ping();

-- The link it opened is the session's: rl_status shows it connected, to
-- the product rl_ping named.
SELECT s.connected,
	   s.server_version = p.server || ' ' || p.version AS same_server
FROM rl_status() s,
	 (SELECT server, version FROM rl_ping() LIMIT 1) p;

-- A member of pg_monitor may call it; a role without may not.
CREATE ROLE regress_rl_ping_monitor IN ROLE pg_monitor;
CREATE ROLE regress_rl_ping_plain;
SET ROLE regress_rl_ping_monitor;
SELECT count(*) >= 1 AS answered, bool_and(rtt_ms >= 0) AS timed FROM rl_ping();
RESET ROLE;
SET ROLE regress_rl_ping_plain;
SELECT count(*) FROM rl_ping();
RESET ROLE;
DROP ROLE regress_rl_ping_monitor;
DROP ROLE regress_rl_ping_plain;

-- try(sql): 'ok', or the SQLSTATE, message and hint of the error raised.
CREATE FUNCTION ping_try(sql text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	state text;
	msg text;
	hint text;
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT,
		hint = PG_EXCEPTION_HINT;
	RETURN state || ': ' || msg || ' / ' || hint;
END
$$;

-- Nothing listens there: an ERROR 08001 that names the server, what
-- failed and the settings to fix, whatever ratelimit.failure_mode says
-- (a call would be let through under "open").
SET ratelimit.redis_mode = standalone;
SET ratelimit.redis_port = 1;
SELECT * FROM rl_ping();
SELECT m AS failure_mode, ping_try('SELECT * FROM rl_ping()') AS error
FROM unnest(ARRAY['open', 'closed', 'error', 'local']) m,
	 LATERAL set_config('ratelimit.failure_mode', m, false) s;
RESET ratelimit.failure_mode;

-- It tries now, whatever is left of the retry interval: the first try
-- above left the server resting, and each later one tried again.
SET ratelimit.retry_interval = 60000;
SELECT failures AS failures0 FROM rl_status() \gset
SELECT ping_try('SELECT * FROM rl_ping()') LIKE '08001:%' AS failed,
	   ping_try('SELECT * FROM rl_ping()') LIKE '08001:%' AS failed_again;
SELECT failures - :failures0 AS new_failures FROM rl_status();
RESET ratelimit.retry_interval;

-- A wrong database is the settings' fault: the hint names the setting.
RESET ratelimit.redis_port;
SET ratelimit.redis_db = 100000;
SELECT replace(ping_try('SELECT * FROM rl_ping()'),
			   ':' || current_setting('ratelimit.redis_port') || '/', ':<port>/') AS error;
RESET ratelimit.redis_db;

-- The local engine reaches no server: one row says so.
SET ratelimit.engine = local;
SET ratelimit.redis_port = 1;
SELECT * FROM rl_ping();
RESET ratelimit.engine;
RESET ratelimit.redis_port;
RESET ratelimit.redis_mode;

-- Back to the settings: answered again at once.
SELECT count(*) >= 1 AS answered, bool_and(server IN ('redis', 'valkey')) AS server_ok
FROM rl_ping();

DROP FUNCTION ping_try(text);
