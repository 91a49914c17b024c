--
-- rl_postgrest_guard and the PostgREST form of errors
--
-- Objects of this suite start with "pgrst_".  pg_regress creates the
-- database afresh and its OID is part of every Redis key, so no state of
-- an earlier run can leak in.
--
-- Each request below is what PostgREST sends: a transaction (READ ONLY
-- for GET), the role switch, the request settings, then the
-- db-pre-request function.  The clock is pinned.
SET ratelimit.test_clock_ms = 1700000000000;

-- The setup the README gives: a pre-request function and the grants the
-- API role needs (PUBLIC's default EXECUTE is taken away here, to show
-- that these grants are enough).
CREATE ROLE pgrst_anon NOLOGIN;
CREATE SCHEMA pgrst_api;
CREATE FUNCTION pgrst_api.pre_request() RETURNS void
LANGUAGE sql AS $$
	SELECT rl_postgrest_guard('gcra', 3, '1 minute')
$$;
REVOKE EXECUTE ON FUNCTION pgrst_api.pre_request() FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION rl_postgrest_guard(text, bigint, interval, text) FROM PUBLIC;
GRANT USAGE ON SCHEMA pgrst_api TO pgrst_anon;
GRANT EXECUTE ON FUNCTION pgrst_api.pre_request() TO pgrst_anon;
GRANT EXECUTE ON FUNCTION rl_postgrest_guard(text, bigint, interval, text) TO pgrst_anon;

-- Runs a call and returns the error as PostgREST reads it.
CREATE FUNCTION pgrst_call(query text,
						   OUT state text, OUT message text, OUT detail text)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE query;
	state := '00000';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL;
END $$;

-- Whether PostgREST accepts a PGRST error: MESSAGE an object with string
-- code and message (details and hint optional strings), DETAIL an object
-- with an integer status and headers whose values are all strings.
CREATE FUNCTION pgrst_parses(message text, detail text) RETURNS boolean
LANGUAGE sql AS $$
	SELECT json_typeof(m) = 'object'
		AND json_typeof(m->'code') = 'string'
		AND json_typeof(m->'message') = 'string'
		AND coalesce(json_typeof(m->'details'), 'string') IN ('string', 'null')
		AND coalesce(json_typeof(m->'hint'), 'string') IN ('string', 'null')
		AND json_typeof(d) = 'object'
		AND json_typeof(d->'status') = 'number'
		AND (d->>'status') ~ '^[0-9]+$'
		AND json_typeof(d->'headers') = 'object'
		AND (SELECT bool_and(json_typeof(value) = 'string') FROM json_each(d->'headers'))
	FROM (SELECT message::json AS m, detail::json AS d) j
$$;

--
-- GET /items as user u1 (JWT sub), limit 3 per minute
--
BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY;
SET LOCAL ROLE pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u1","role":"pgrst_anon"}', true),
	   set_config('request.headers', '{"x-forwarded-for":"203.0.113.7, 10.0.0.1","user-agent":"curl"}', true),
	   set_config('request.method', 'GET', true),
	   set_config('request.path', '/items', true);
SELECT pgrst_api.pre_request();
-- On success the RateLimit fields are in response.headers: 2 left, quota
-- back in 20 s (GCRA: one unit every 20 s).
SELECT current_setting('response.headers');
SELECT pgrst_api.pre_request();
SELECT pgrst_api.pre_request();
SELECT current_setting('response.headers')::json->-2 AS last_ratelimit;
-- The fourth request: the error PostgREST turns into HTTP 429.
SELECT * FROM pgrst_call('SELECT pgrst_api.pre_request()');
SELECT pgrst_parses(message, detail),
	   message::json->>'code' AS code,
	   detail::json->>'status' AS status,
	   detail::json->'headers'->>'Retry-After' AS retry_after,
	   detail::json->'headers'->>'RateLimit' AS ratelimit,
	   detail::json->'headers'->>'RateLimit-Policy' AS policy
FROM pgrst_call('SELECT pgrst_api.pre_request()');
COMMIT;
-- The limiter was keyed by the JWT subject.
SELECT * FROM rl_peek('sub:u1', 'gcra', 3, '1 minute');

-- As psql shows it:
BEGIN READ ONLY;
SET LOCAL ROLE pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u1"}', true);
SELECT pgrst_api.pre_request();
ROLLBACK;

--
-- Anonymous requests: the first X-Forwarded-For address, spaces trimmed
--
BEGIN READ ONLY;
SET LOCAL ROLE pgrst_anon;
SELECT set_config('request.jwt.claims', '{"role":"pgrst_anon"}', true),
	   set_config('request.headers', '{"x-forwarded-for":"  198.51.100.4 ,10.0.0.1"}', true),
	   set_config('request.method', 'GET', true);
SELECT pgrst_api.pre_request();
ROLLBACK;
SELECT * FROM rl_peek('ip:198.51.100.4', 'gcra', 3, '1 minute');

-- A numeric subject is a subject too.
BEGIN READ ONLY;
SET LOCAL ROLE pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":42}', true);
SELECT pgrst_api.pre_request();
ROLLBACK;
SELECT * FROM rl_peek('sub:42', 'gcra', 3, '1 minute');

-- '' settings, as PostgREST leaves them on a pooled connection, count as
-- absent: no sub, no header, so the connection's address (none over a
-- Unix socket: 'anonymous').
SELECT set_config('request.jwt.claims', '', false),
	   set_config('request.headers', '', false),
	   set_config('request.method', '', false),
	   set_config('response.headers', '', false);
BEGIN READ ONLY;
SET LOCAL ROLE pgrst_anon;
SELECT pgrst_api.pre_request();
SELECT json_array_length(current_setting('response.headers')::json) AS headers;
ROLLBACK;
SELECT * FROM rl_peek(coalesce('ip:' || host(inet_client_addr()), 'anonymous'),
					  'gcra', 3, '1 minute');

-- An explicit key wins; headers already set are kept.
BEGIN READ ONLY;
SET LOCAL ROLE pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u1"}', true),
	   set_config('response.headers', '[{"Cache-Control": "no-store"}]', true);
SELECT rl_postgrest_guard('token_bucket', 10, '1500 ms', 'tenant:7');
SELECT current_setting('response.headers');
-- response.headers that is not an array is an error.
SELECT set_config('response.headers', '{"Cache-Control": "no-store"}', true);
SELECT * FROM pgrst_call($$SELECT rl_postgrest_guard('token_bucket', 10, '1500 ms', 'tenant:7')$$);
ROLLBACK;

-- Retry-After is whole seconds, rounded up: 3 per 10 s refuses the fourth
-- call for 3334 ms, so "4".
BEGIN READ ONLY;
SET LOCAL ROLE pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u2"}', true);
SELECT rl_postgrest_guard('gcra', 3, '10 seconds') FROM generate_series(1, 3);
SELECT detail FROM pgrst_call($$SELECT rl_postgrest_guard('gcra', 3, '10 seconds')$$);
ROLLBACK;

-- Bad arguments are plain errors.
SELECT * FROM pgrst_call($$SELECT rl_postgrest_guard(NULL, 3, '10 seconds')$$);
SELECT * FROM pgrst_call($$SELECT rl_postgrest_guard('gcra', 3, '10 seconds', '')$$);
SELECT * FROM pgrst_call($$SELECT rl_postgrest_guard('gcra', 0, '10 seconds')$$);

-- A role without the grant cannot call it.
CREATE ROLE pgrst_other NOLOGIN;
SET ROLE pgrst_other;
SELECT state FROM pgrst_call($$SELECT rl_postgrest_guard('gcra', 3, '10 seconds')$$);
RESET ROLE;

--
-- Redis unavailable
--
SET ratelimit.redis_port = 1;
-- open: the request passes, without RateLimit headers (nothing is known).
BEGIN READ ONLY;
SET LOCAL ROLE pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u3"}', true);
SELECT pgrst_api.pre_request();
SELECT current_setting('response.headers', true) AS response_headers;
ROLLBACK;
-- closed: a 429 whose Retry-After is the time until the next attempt, and
-- no RateLimit field.
SET ratelimit.failure_mode = closed;
BEGIN READ ONLY;
SET LOCAL ROLE pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u3"}', true);
SELECT pgrst_parses(message, detail), detail FROM pgrst_call('SELECT pgrst_api.pre_request()');
ROLLBACK;
-- error: SQLSTATE 08006, which PostgREST answers with 503.
SET ratelimit.failure_mode = error;
BEGIN READ ONLY;
SET LOCAL ROLE pgrst_anon;
SELECT state, message FROM pgrst_call('SELECT pgrst_api.pre_request()');
ROLLBACK;
RESET ratelimit.failure_mode;
RESET ratelimit.redis_port;

--
-- The throttling trigger inside a PostgREST request: POST /comments
--
CREATE TABLE pgrst_comments (id serial, author_id int, body text);
CREATE TRIGGER pgrst_comments_throttle BEFORE INSERT ON pgrst_comments
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author_id', 'fixed_window', '1', '1 minute');
GRANT INSERT ON pgrst_comments TO pgrst_anon;
GRANT USAGE ON SEQUENCE pgrst_comments_id_seq TO pgrst_anon;
INSERT INTO pgrst_comments (author_id, body) VALUES (1, 'first');
BEGIN;
SET LOCAL ROLE pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u1","role":"pgrst_anon"}', true),
	   set_config('request.method', 'POST', true),
	   set_config('request.path', '/pgrst_comments', true);
SELECT pgrst_parses(message, detail), state, message, detail
FROM pgrst_call($$INSERT INTO pgrst_comments (author_id, body) VALUES (1, 'second')$$);
-- The same trigger in a PostgREST request identified by its method alone.
SELECT set_config('request.jwt.claims', '', true);
SELECT state, message::json->>'code' AS code
FROM pgrst_call($$INSERT INTO pgrst_comments (author_id, body) VALUES (1, 'second')$$);
ROLLBACK;
-- Outside PostgREST ('' settings left behind) the trigger raises PT429.
SELECT set_config('request.method', '', false);
SELECT state, message, detail
FROM pgrst_call($$INSERT INTO pgrst_comments (author_id, body) VALUES (1, 'second')$$);

-- A statement trigger's too-large statement, inside PostgREST: a 429 too.
CREATE TABLE pgrst_bulk (author_id int);
CREATE TRIGGER pgrst_bulk_throttle AFTER INSERT ON pgrst_bulk
	REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '2', '1 minute');
BEGIN;
SELECT set_config('request.method', 'POST', true);
SELECT pgrst_parses(message, detail), message, detail
FROM pgrst_call($$INSERT INTO pgrst_bulk VALUES (1), (1), (1)$$);
ROLLBACK;

DROP TABLE pgrst_comments, pgrst_bulk;
GRANT EXECUTE ON FUNCTION rl_postgrest_guard(text, bigint, interval, text) TO PUBLIC;
REVOKE EXECUTE ON FUNCTION rl_postgrest_guard(text, bigint, interval, text) FROM pgrst_anon;
DROP SCHEMA pgrst_api CASCADE;
DROP FUNCTION pgrst_call(text);
DROP FUNCTION pgrst_parses(text, text);
DROP ROLE pgrst_anon;
DROP ROLE pgrst_other;
