--
-- stats: the server-wide statistics (rl_stats, rl_stats_rtt,
-- rl_stats_limiters, rl_stats_reset), who may read and reset them, and
-- exact counts from this session's calls, read as differences from a mark
-- (no other session calls the limiter meanwhile).  The statistics are
-- reset first, so the limiter table holds only this suite's keys.
--
-- The clock is pinned at 1700000000000 ms, 20 s into a minute.
SET ratelimit.test_clock_ms = 1700000000000;
SET ratelimit.deny_cache = off;
SELECT count(rl_reset(k, 'fixed_window', l, '1 minute')) AS cleaned
FROM (VALUES ('stats:a', 2), ('stats:c', 2), ('stats:off', 1)) v(k, l);
SELECT count(rl_reset_layered('stats:b',
	ARRAY[('fixed_window', 10, '1 minute')::rl_rule,
		  ('fixed_window', 1, '1 hour')::rl_rule])) AS cleaned;
SELECT rl_stats_reset();

-- try(sql): 'ok', or the SQLSTATE and message of the error raised.
CREATE FUNCTION stats_try(sql text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	state text;
	msg text;
BEGIN
	EXECUTE sql;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
	RETURN state || ': ' || msg;
END
$$;

-- The SQL surface: three views over functions of the same names, and the
-- reset.
SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod)
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
WHERE c.relname IN ('rl_stats', 'rl_stats_rtt', 'rl_stats_limiters')
ORDER BY c.relname, a.attnum;
SELECT 'rl_stats_reset()'::regprocedure, prorettype::regtype
FROM pg_proc WHERE oid = 'rl_stats_reset()'::regprocedure;

-- Grants: SELECT on the views and EXECUTE on their functions for
-- pg_monitor, nothing for PUBLIC; the reset for no one.
SELECT v AS view,
	   has_table_privilege('public', v, 'SELECT') AS public,
	   has_table_privilege('pg_monitor', v, 'SELECT') AS pg_monitor,
	   has_function_privilege('public', v || '()', 'EXECUTE') AS public_fn,
	   has_function_privilege('pg_monitor', v || '()', 'EXECUTE') AS pg_monitor_fn
FROM unnest(ARRAY['rl_stats', 'rl_stats_rtt', 'rl_stats_limiters']) v;
SELECT has_function_privilege('public', 'rl_stats_reset()', 'EXECUTE') AS public,
	   has_function_privilege('pg_monitor', 'rl_stats_reset()', 'EXECUTE') AS pg_monitor;

-- The settings: ratelimit.stats for superusers, the table size fixed at
-- server start.
SHOW ratelimit.stats;
SHOW ratelimit.stats_max_limiters;
SELECT stats_try('SET ratelimit.stats_max_limiters = 50');

-- Server-wide counts as differences from a mark.
CREATE TABLE stats_mark AS SELECT * FROM rl_stats;
CREATE FUNCTION stats_delta(OUT calls bigint, OUT allowed bigint,
							OUT denied bigint, OUT shadow_denied bigint,
							OUT fail_open bigint, OUT fail_closed bigint,
							OUT failures bigint, OUT by_reason text,
							OUT redirects bigint)
LANGUAGE sql AS $$
	SELECT s.calls - m.calls, s.allowed - m.allowed, s.denied - m.denied,
		   s.shadow_denied - m.shadow_denied, s.fail_open - m.fail_open,
		   s.fail_closed - m.fail_closed, s.failures - m.failures,
		   format('timeout %s connect %s refused %s misconfigured %s protocol %s lost %s unavailable %s',
				  s.failures_timeout - m.failures_timeout,
				  s.failures_connect - m.failures_connect,
				  s.failures_refused - m.failures_refused,
				  s.failures_misconfigured - m.failures_misconfigured,
				  s.failures_protocol - m.failures_protocol,
				  s.failures_lost - m.failures_lost,
				  s.failures_unavailable - m.failures_unavailable),
		   s.redirects - m.redirects
	FROM rl_stats s, stats_mark m
$$;
CREATE FUNCTION stats_remark() RETURNS void
LANGUAGE sql AS $$
	TRUNCATE stats_mark;
	INSERT INTO stats_mark SELECT * FROM rl_stats;
$$;

-- Five calls on a limit of 2: 2 admitted, 3 denied.
SELECT allowed, count(*)
FROM (SELECT (rl_allow('stats:a', 'fixed_window', 2, '1 minute')).allowed
	  FROM generate_series(1, 5)) s
GROUP BY allowed ORDER BY allowed;
SELECT * FROM stats_delta();

-- Shadow mode: two more calls let through, counted as shadow denials.
SELECT stats_remark();
SET ratelimit.enforce = off;
SELECT (rl_allow('stats:a', 'fixed_window', 2, '1 minute')).allowed
FROM generate_series(1, 2);
RESET ratelimit.enforce;
SELECT * FROM stats_delta();

-- A layered call denied by its second rule counts that rule's key.
SELECT stats_remark();
SELECT (rl_allow_layered('stats:b',
	ARRAY[('fixed_window', 10, '1 minute')::rl_rule,
		  ('fixed_window', 1, '1 hour')::rl_rule])).allowed
FROM generate_series(1, 3);
SELECT * FROM stats_delta();

-- The limiters denying most, with their Redis keys (the database oid
-- masked): stats:a 3 + 2 shadow, the layered rule of one hour 2.
SELECT regexp_replace(key, '\{[0-9]+:', '{DB:') AS key, algorithm, denied,
	   last_denied IS NOT NULL AS has_time
FROM rl_stats_limiters ORDER BY denied DESC, key;

-- rl_status() is still this backend's own: 10 calls so far.
SELECT calls, allowed, denied FROM rl_status();

-- Round trips were timed: every bucket's bounds in order, the counts
-- adding up to rl_stats.round_trips, the percentiles in order.
SELECT round_trips - (SELECT round_trips FROM stats_mark) >= 3 AS timed,
	   rtt_p50_ms > 0 AND rtt_p50_ms <= rtt_p99_ms AND rtt_p99_ms <= rtt_p999_ms
		   AS ordered,
	   round_trips = (SELECT sum(round_trips) FROM rl_stats_rtt) AS sums
FROM rl_stats;
SELECT bool_and(lower_us < upper_us) AS bounded,
	   bool_and(upper_us <= 5 * lower_us / 4 OR lower_us < 4) AS quarter_wide
FROM rl_stats_rtt;

-- Failures by reason.  A closed port: one failure (connect), then the
-- policy answers every call until retry_interval has passed.
SELECT stats_remark();
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
SET ratelimit.retry_interval = 3600000;
SELECT (rl_allow('stats:c', 'fixed_window', 2, '1 minute')).allowed
FROM generate_series(1, 3);
SET ratelimit.failure_mode = closed;
SELECT (rl_allow('stats:c', 'fixed_window', 2, '1 minute')).allowed
FROM generate_series(1, 2);
SELECT * FROM stats_delta();
RESET ratelimit.failure_mode;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;

-- A database Redis does not have: misconfigured (one server: a cluster
-- has only database 0, a configuration error of its own).
SELECT stats_remark();
SET ratelimit.redis_mode = standalone;
SET ratelimit.redis_db = 9999;
-- (Its WARNING may fall within the interval of the one above: not shown.)
SET client_min_messages = error;
SELECT (rl_allow('stats:c', 'fixed_window', 2, '1 minute')).allowed;
RESET client_min_messages;
SELECT * FROM stats_delta();
RESET ratelimit.redis_db;
RESET ratelimit.redis_mode;
RESET ratelimit.retry_interval;

-- ratelimit.stats off: calls are still counted, but no round trip is
-- timed and no limiter's denial is added.
SELECT stats_remark();
SET ratelimit.stats = off;
SELECT (rl_allow('stats:off', 'fixed_window', 1, '1 minute')).allowed
FROM generate_series(1, 3);
RESET ratelimit.stats;
SELECT d.calls, d.denied,
	   s.round_trips - m.round_trips AS timed,
	   (SELECT count(*) FROM rl_stats_limiters WHERE key LIKE '%stats:off%') AS listed
FROM stats_delta() d, rl_stats s, stats_mark m;

-- Privileges.  An ordinary role may neither read nor reset; a member of
-- pg_monitor reads everything, keys included, but may not reset; a role
-- granted the view itself reads the counts without the keys.
CREATE ROLE regress_rl_stats_plain;
CREATE ROLE regress_rl_stats_monitor IN ROLE pg_monitor;
CREATE ROLE regress_rl_stats_granted;
GRANT SELECT ON rl_stats_limiters TO regress_rl_stats_granted;
GRANT EXECUTE ON FUNCTION rl_stats_limiters() TO regress_rl_stats_granted;
SET ROLE regress_rl_stats_plain;
SELECT stats_try('SELECT * FROM rl_stats') AS rl_stats,
	   stats_try('SELECT * FROM rl_stats_rtt') AS rl_stats_rtt,
	   stats_try('SELECT * FROM rl_stats_limiters') AS rl_stats_limiters,
	   stats_try('SELECT rl_stats_reset()') AS reset,
	   stats_try('SET ratelimit.stats = off') AS set_stats;
SET ROLE regress_rl_stats_monitor;
SELECT calls > 0 AS reads FROM rl_stats;
SELECT count(*) > 0 AS reads FROM rl_stats_rtt;
SELECT regexp_replace(key, '\{[0-9]+:', '{DB:') AS key, denied
FROM rl_stats_limiters ORDER BY denied DESC, key LIMIT 1;
SELECT stats_try('SELECT rl_stats_reset()') AS reset;
SET ROLE regress_rl_stats_granted;
SELECT key, algorithm, denied FROM rl_stats_limiters ORDER BY denied DESC LIMIT 1;
SELECT stats_try('SELECT * FROM rl_stats') AS rl_stats;
RESET ROLE;

-- The reset: every count starts over, the table empties, stats_reset
-- moves on; rl_status() is untouched.
SELECT stats_remark();
SELECT rl_stats_reset();
SELECT calls, allowed, denied, shadow_denied, failures, round_trips,
	   rtt_p50_ms, limiters, limiters_evicted,
	   stats_reset > (SELECT stats_reset FROM stats_mark) AS later
FROM rl_stats;
SELECT count(*) FROM rl_stats_limiters;
SELECT count(*) FROM rl_stats_rtt;
SELECT calls FROM rl_status();
-- And counts again from there.
SELECT (rl_allow('stats:a', 'fixed_window', 2, '1 minute')).allowed;
SELECT calls, allowed, denied FROM rl_stats;
SELECT regexp_replace(key, '\{[0-9]+:', '{DB:') AS key, denied
FROM rl_stats_limiters;

REVOKE SELECT ON rl_stats_limiters FROM regress_rl_stats_granted;
REVOKE EXECUTE ON FUNCTION rl_stats_limiters() FROM regress_rl_stats_granted;
DROP ROLE regress_rl_stats_plain, regress_rl_stats_monitor,
	regress_rl_stats_granted;
DROP FUNCTION stats_delta(), stats_remark(), stats_try(text);
DROP TABLE stats_mark;
SELECT count(rl_reset(k, 'fixed_window', l, '1 minute')) AS cleaned
FROM (VALUES ('stats:a', 2), ('stats:c', 2), ('stats:off', 1)) v(k, l);
SELECT count(rl_reset_layered('stats:b',
	ARRAY[('fixed_window', 10, '1 minute')::rl_rule,
		  ('fixed_window', 1, '1 hour')::rl_rule])) AS cleaned;
