--
-- settings: who may change the ratelimit.* settings, what values they
-- take, and what each failure_mode answers while Redis is out of reach.
--
-- Every setting is superuser-only: a role that could repoint Redis or
-- switch the failure mode could walk past its limits.
--
LOAD 'ratelimit';
SET ratelimit.test_clock_ms = 1800000000000;

-- try(sql) runs one statement and returns 'ok', or the SQLSTATE and the
-- message of the error it raised.
CREATE FUNCTION try(sql text) RETURNS text
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

-- Clean up every limiter this suite writes, under each prefix and
-- namespace it uses (the shared namespace outlives the database).
SELECT count(rl_reset(k, a, l, w::interval)) AS cleaned
FROM (VALUES ('settings:plain', 'gcra', 5, '1 minute'), ('settings:f', 'gcra', 5, '10 s'),
			 ('settings:f', 'gcra', 5, '1 minute'), ('settings:clock', 'gcra', 5, '1 minute'),
			 ('settings:ns', 'fixed_window', 5, '10 s')) v(k, a, l, w);
SET ratelimit.key_prefix = 'other:';
SELECT count(rl_reset('settings:ns', 'fixed_window', 5, '10 s')) AS cleaned;
RESET ratelimit.key_prefix;
SET ratelimit.isolate_databases = off;
SELECT count(rl_reset('settings:ns', 'fixed_window', 5, '10 s')) AS cleaned;
RESET ratelimit.isolate_databases;

-- Every setting, with a valid value to try.
CREATE TABLE rl_settings (name text, value text);
INSERT INTO rl_settings VALUES
	('ratelimit.redis_mode', 'cluster'),
	('ratelimit.redis_nodes', '10.0.0.1:7000,10.0.0.2:7000'),
	('ratelimit.redis_host', '10.0.0.1'),
	('ratelimit.redis_port', '6380'),
	('ratelimit.redis_socket', '/tmp/redis.sock'),
	('ratelimit.redis_db', '1'),
	('ratelimit.redis_username', 'someone'),
	('ratelimit.redis_password', 'secret'),
	('ratelimit.redis_password_file', '/tmp/redis.pw'),
	('ratelimit.sentinel_master', 'other'),
	('ratelimit.sentinel_username', 'someone'),
	('ratelimit.sentinel_password', 'secret'),
	('ratelimit.sentinel_check_interval', '0'),
	('ratelimit.redis_tls', 'on'),
	('ratelimit.redis_tls_ca_file', '/tmp/ca.crt'),
	('ratelimit.redis_tls_cert_file', '/tmp/client.crt'),
	('ratelimit.redis_tls_key_file', '/tmp/client.key'),
	('ratelimit.redis_tls_server_name', 'redis.example.com'),
	('ratelimit.connect_timeout', '1'),
	('ratelimit.command_timeout', '1'),
	('ratelimit.failure_mode', 'open'),
	('ratelimit.retry_interval', '0'),
	('ratelimit.key_prefix', 'other:'),
	('ratelimit.isolate_databases', 'off'),
	('ratelimit.deny_cache', 'off'),
	('ratelimit.enforce', 'off'),
	('ratelimit.stats', 'off'),
	('ratelimit.stats_max_limiters', '20'),
	('ratelimit.trusted_proxy_hops', '3'),
	('ratelimit.ipv6_prefix', '48'),
	('ratelimit.test_clock_ms', '1'),
	('ratelimit.engine', 'local'),
	('ratelimit.local_max_entries', '1000'),
	('ratelimit.local_log_entries', '2048');
GRANT SELECT ON rl_settings TO PUBLIC;

-- The list is complete: every ratelimit setting in pg_settings is
-- superuser-only but ratelimit.stats_max_limiters,
-- ratelimit.local_max_entries and ratelimit.local_log_entries (fixed at
-- server start), plus the two passwords (Redis's, the Sentinels'), which
-- are never listed.
SELECT count(*) AS listed,
	   count(*) FILTER (WHERE context = 'superuser') AS superuser_only,
	   count(*) FILTER (WHERE name IN (SELECT name FROM rl_settings)) AS tried
FROM pg_settings WHERE name LIKE 'ratelimit.%';
SELECT name, boot_val, unit, vartype, enumvals
FROM pg_settings WHERE name LIKE 'ratelimit.%' ORDER BY name;

CREATE ROLE regress_rl_plain NOSUPERUSER NOCREATEDB NOCREATEROLE;
SET ROLE regress_rl_plain;

-- As an ordinary role: SET, SET LOCAL, set_config and a function's SET
-- clause are all refused with 42501.
SELECT name,
	   try(format('SET %s = %L', name, value)) AS set,
	   try(format('SET LOCAL %s = %L', name, value)) AS set_local,
	   try(format('SELECT set_config(%L, %L, false)', name, value))
		   AS set_config,
	   try(format('CREATE FUNCTION pg_temp.f_%s() RETURNS int LANGUAGE sql '
				  'SET %s = %L RETURN 1', replace(name, '.', '_'), name,
				  value)) AS function_set
FROM rl_settings ORDER BY name;
-- Nothing changed.
SELECT current_setting('ratelimit.failure_mode') AS failure_mode,
	   current_setting('ratelimit.key_prefix') AS key_prefix,
	   current_setting('ratelimit.redis_host') AS redis_host,
	   current_setting('ratelimit.test_clock_ms') AS test_clock_ms;

-- The password cannot be read, and is not listed.
SHOW ratelimit.redis_password;
\echo :LAST_ERROR_SQLSTATE
SELECT try($$SELECT current_setting('ratelimit.redis_password')$$);
SELECT try($$SELECT current_setting('ratelimit.sentinel_password')$$);
SELECT count(*) AS listed FROM pg_settings
WHERE name IN ('ratelimit.redis_password', 'ratelimit.sentinel_password');
SELECT count(*) AS listed FROM pg_settings WHERE name LIKE 'ratelimit.%';

-- The prefix is reserved: no placeholder can be made under it.
SET ratelimit.typo = 1;
\echo :LAST_ERROR_SQLSTATE

-- No function of the extension is executable by PUBLIC: a role calls
-- only what it was granted.
SELECT * FROM rl_allow('settings:plain', 'gcra', 5, '1 minute');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT p.oid::regprocedure AS function,
	   has_function_privilege('regress_rl_plain', p.oid, 'EXECUTE') AS plain
FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid
	AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'ratelimit'
ORDER BY p.oid::regprocedure::text;
GRANT EXECUTE ON FUNCTION rl_allow(text, text, bigint, interval, bigint, bigint),
	rl_peek(text, text, bigint, interval, bigint) TO regress_rl_plain;
SET ROLE regress_rl_plain;
-- Granted rl_allow and rl_peek, the role still may not reset or list.
SELECT * FROM rl_allow('settings:plain', 'gcra', 5, '1 minute');
SELECT * FROM rl_peek('settings:plain', 'gcra', 5, '1 minute');
SELECT rl_reset('settings:plain', 'gcra', 5, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_status();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE EXECUTE ON FUNCTION rl_allow(text, text, bigint, interval, bigint, bigint),
	rl_peek(text, text, bigint, interval, bigint) FROM regress_rl_plain;
DROP ROLE regress_rl_plain;

-- The password is shown masked, to every role that may read it at all:
-- '' when none is set, '********' when one is.  A member of
-- pg_read_all_settings (pg_monitor) may read superuser-only settings, so
-- without the mask it would read the password.
SELECT current_setting('ratelimit.redis_password') AS unset;
SET ratelimit.redis_password = 'Settings-Secret-5521';
SHOW ratelimit.redis_password;
SELECT current_setting('ratelimit.redis_password') AS superuser;
SELECT current_setting('ratelimit.sentinel_password') AS sentinel_unset;
SET ratelimit.sentinel_password = 'Settings-Sentinel-Secret-8830';
SHOW ratelimit.sentinel_password;
CREATE ROLE regress_rl_settings_reader NOSUPERUSER IN ROLE pg_read_all_settings;
SET ROLE regress_rl_settings_reader;
SHOW ratelimit.redis_password;
SELECT current_setting('ratelimit.redis_password') AS reader,
	   current_setting('ratelimit.redis_password', true) AS reader_missing_ok;
SELECT current_setting('ratelimit.sentinel_password') AS sentinel_reader;
SELECT count(*) AS listed FROM pg_settings
WHERE name IN ('ratelimit.redis_password', 'ratelimit.sentinel_password');
SELECT count(*) AS listed FROM pg_show_all_settings()
WHERE name IN ('ratelimit.redis_password', 'ratelimit.sentinel_password');
-- The path of the password file is no secret: it is listed.
SELECT name, setting, context FROM pg_settings
WHERE name = 'ratelimit.redis_password_file';
RESET ROLE;
DROP ROLE regress_rl_settings_reader;
RESET ratelimit.redis_password;
RESET ratelimit.sentinel_password;
SELECT count(*) AS listed FROM pg_settings
WHERE name = 'ratelimit.redis_password';
SET ratelimit.typo = 1;
\echo :LAST_ERROR_SQLSTATE

-- Values out of range are refused with 22023.
SELECT v, try('SET ' || v)
FROM unnest(ARRAY[
	'ratelimit.redis_port = 0',
	'ratelimit.redis_port = 70000',
	'ratelimit.redis_port = -1',
	'ratelimit.redis_db = -1',
	'ratelimit.connect_timeout = 0',
	'ratelimit.command_timeout = -5',
	'ratelimit.retry_interval = -1',
	'ratelimit.failure_mode = maybe',
	'ratelimit.failure_mode = ''''',
	'ratelimit.isolate_databases = perhaps',
	'ratelimit.key_prefix = ''a{b''',
	'ratelimit.key_prefix = ''}''',
	'ratelimit.key_prefix = ''' || repeat('p', 65) || '''',
	'ratelimit.trusted_proxy_hops = -1',
	'ratelimit.trusted_proxy_hops = 17',
	'ratelimit.test_clock_ms = -1',
	'ratelimit.test_clock_ms = 1e16',
	'ratelimit.redis_socket = ''redis.sock''',
	'ratelimit.redis_mode = replicated',
	'ratelimit.redis_nodes = ''10.0.0.1''',
	'ratelimit.redis_nodes = ''10.0.0.1:0''',
	'ratelimit.redis_nodes = ''10.0.0.1:7000,''',
	'ratelimit.redis_nodes = '':7000''',
	'ratelimit.redis_nodes = ''[::1:7000''',
	'ratelimit.redis_nodes = ''10.0.0.1:7000 10.0.0.2:7000''',
	'ratelimit.test_clock_ms = 9007199254741',
	'ratelimit.engine = memory',
	'ratelimit.failure_mode = locally',
	'ratelimit.local_max_entries = 5000']) v;
SET ratelimit.key_prefix = 'rl{';
\echo :LAST_ERROR_SQLSTATE
SET ratelimit.failure_mode = 'maybe';
\echo :LAST_ERROR_SQLSTATE
-- Accepted: units, and the edges.
SET ratelimit.connect_timeout = '2s';
SET ratelimit.command_timeout = 1;
SET ratelimit.retry_interval = 0;
SET ratelimit.key_prefix = '';
SET ratelimit.redis_port = 65535;
SET ratelimit.redis_nodes = ' 10.0.0.1:7000 , [::1]:7001,host.example:7002 ';
SELECT current_setting('ratelimit.redis_nodes') AS redis_nodes;
RESET ratelimit.redis_nodes;
SELECT current_setting('ratelimit.connect_timeout') AS connect_timeout,
	   current_setting('ratelimit.command_timeout') AS command_timeout,
	   current_setting('ratelimit.retry_interval') AS retry_interval,
	   current_setting('ratelimit.key_prefix') = '' AS empty_prefix,
	   current_setting('ratelimit.redis_port') AS redis_port;
RESET ratelimit.connect_timeout;
RESET ratelimit.command_timeout;
RESET ratelimit.retry_interval;
RESET ratelimit.key_prefix;
RESET ratelimit.redis_port;

-- key_prefix and isolate_databases name other limiters: the same key
-- starts fresh under another prefix (t,4,0,10000) and in the shared
-- namespace (t,4,0,10000), and keeps its 2 left under the defaults.
SELECT * FROM rl_allow('settings:ns', 'fixed_window', 5, '10 s', 3);
SET ratelimit.key_prefix = 'other:';
SELECT * FROM rl_allow('settings:ns', 'fixed_window', 5, '10 s');
RESET ratelimit.key_prefix;
SET ratelimit.isolate_databases = off;
SELECT * FROM rl_allow('settings:ns', 'fixed_window', 5, '10 s');
RESET ratelimit.isolate_databases;
SELECT * FROM rl_peek('settings:ns', 'fixed_window', 5, '10 s');
SET ratelimit.key_prefix = 'other:';
SELECT rl_reset('settings:ns', 'fixed_window', 5, '10 s');
RESET ratelimit.key_prefix;
SET ratelimit.isolate_databases = off;
SELECT rl_reset('settings:ns', 'fixed_window', 5, '10 s');
RESET ratelimit.isolate_databases;
SELECT rl_reset('settings:ns', 'fixed_window', 5, '10 s');

-- failure_mode with Redis out of reach (nothing listens on port 1, so the
-- connection is refused at once; redis_nodes names it too, for the same
-- test against a cluster, whose endpoint reads "cluster:127.0.0.1:1").
-- A long retry_interval means a single connection attempt; the calls
-- after it answer without trying.
SELECT fail_open AS open0, fail_closed AS closed0, failures AS failures0
FROM rl_status() \gset
SET ratelimit.retry_interval = '1h';
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
-- open: allowed, nothing known: (t,NULL,0,NULL).  One WARNING.
SET ratelimit.failure_mode = open;
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
-- closed: denied until the next attempt, within the hour: (f,NULL,>0,NULL).
SET ratelimit.failure_mode = closed;
SELECT allowed, remaining, retry_after_ms BETWEEN 1 AND 3600000 AS retry_later,
	   reset_after_ms
FROM rl_allow('settings:f', 'gcra', 5, '10 s');
SELECT allowed, remaining, retry_after_ms BETWEEN 1 AND 3600000 AS retry_later,
	   reset_after_ms
FROM rl_peek('settings:f', 'gcra', 5, '10 s');
-- error: 08006.
SET ratelimit.failure_mode = error;
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
\echo :LAST_ERROR_SQLSTATE
-- rl_reset is administrative: 08006 whatever the mode.
SET ratelimit.failure_mode = open;
SELECT rl_reset('settings:f', 'gcra', 5, '10 s');
\echo :LAST_ERROR_SQLSTATE
SELECT regexp_replace(endpoint, '^cluster:', '') AS endpoint,
	   connected, last_error, last_error_at IS NOT NULL AS at,
	   fail_open - :open0 AS fail_open, fail_closed - :closed0 AS fail_closed,
	   failures - :failures0 AS failures
FROM rl_status();
-- RESET of the port takes effect at the next call, despite the hour.
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
SELECT connected, fail_open - :open0 AS fail_open,
	   failures - :failures0 AS failures
FROM rl_status();
RESET ratelimit.failure_mode;
RESET ratelimit.retry_interval;

-- Settings that cannot work together are configuration errors, answered
-- by the failure policy with a WARNING that names the setting to fix; no
-- Redis round trip is made.  Sentinel mode needs the Sentinels listed,
-- and has no use for a socket.  (Port 1: the WARNINGs name the endpoint.)
SELECT failures AS failures0 FROM rl_status() \gset
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '';
SET ratelimit.redis_mode = sentinel;
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
SELECT endpoint, last_error FROM rl_status();
SET ratelimit.redis_nodes = '127.0.0.1:1';
SET ratelimit.redis_socket = '/tmp/redis.sock';
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
SELECT endpoint, last_error FROM rl_status();
RESET ratelimit.redis_socket;
-- No Sentinel listens on port 1: an outage, not a configuration error.
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
SELECT endpoint, connected, last_error FROM rl_status();
RESET ratelimit.redis_nodes;
SET ratelimit.redis_mode = cluster;
SET ratelimit.redis_db = 1;
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
SELECT last_error FROM rl_status();
RESET ratelimit.redis_db;
SET ratelimit.redis_socket = '/tmp/redis.sock';
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
SELECT last_error, failures - :failures0 AS failures FROM rl_status();
RESET ratelimit.redis_socket;
-- The suite's Redis is no cluster node: a configuration error, too (an
-- empty redis_nodes falls back to redis_host:redis_port).
RESET ratelimit.redis_port;
SET ratelimit.redis_nodes = '';
SET client_min_messages = error;
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
RESET client_min_messages;
SELECT last_error FROM rl_status();
RESET ratelimit.redis_mode;
RESET ratelimit.redis_nodes;
-- TLS needs TCP: with a Unix socket it is a configuration error, too.
SET ratelimit.redis_mode = standalone;
SET ratelimit.redis_port = 1;
SET ratelimit.redis_tls = on;
SET ratelimit.redis_socket = '/tmp/redis.sock';
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
SELECT last_error FROM rl_status();
RESET ratelimit.redis_socket;
RESET ratelimit.redis_tls;
RESET ratelimit.redis_port;
RESET ratelimit.redis_mode;
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '10 s');
SELECT rl_reset('settings:f', 'gcra', 5, '10 s');

-- The Redis clock when none is pinned: a fresh gcra key reads the same,
-- (t,4,0,12000).
RESET ratelimit.test_clock_ms;
SELECT * FROM rl_allow('settings:clock', 'gcra', 5, '1 minute');
SELECT rl_reset('settings:clock', 'gcra', 5, '1 minute');

-- local, with Redis out of reach again: the local engine answers,
-- exactly: (t,4,0,12000) (t,3,0,24000), no policy answer counted; a reset
-- under failure_mode = local clears the local engine's state too, before
-- Redis refuses it (08006): (t,4,0,12000) again.
SET ratelimit.test_clock_ms = 1800000000000;
SELECT fail_open AS open1, fail_closed AS closed1 FROM rl_status() \gset
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
SET ratelimit.retry_interval = '1h';
SET ratelimit.failure_mode = local;
-- (The WARNING may fall within the interval of the one above: not shown.)
SET client_min_messages = error;
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '1 minute');
RESET client_min_messages;
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '1 minute');
SELECT rl_reset('settings:f', 'gcra', 5, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_allow('settings:f', 'gcra', 5, '1 minute');
SELECT fail_open - :open1 AS fail_open, fail_closed - :closed1 AS fail_closed
FROM rl_status();
SET ratelimit.engine = local;
SELECT rl_reset('settings:f', 'gcra', 5, '1 minute');
RESET ratelimit.engine;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;
RESET ratelimit.failure_mode;
RESET ratelimit.retry_interval;
RESET ratelimit.test_clock_ms;

DROP TABLE rl_settings;
DROP FUNCTION try(text);
