/* sql/ratelimit--0.6.0.sql */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION ratelimit" to load this file. \quit

-- The answer of every check.
CREATE TYPE rl_result AS (
	allowed boolean,
	remaining bigint,
	retry_after_ms bigint,
	reset_after_ms bigint
);

-- Not STRICT: a NULL argument raises an error instead of returning a NULL
-- row, which "IF NOT (rl_allow(...)).allowed" would silently let through.
-- rl_allow and rl_peek: see "Burst (issue 14)" below.

-- A limiter is its key, algorithm, limit, window and burst (0.4.0): the
-- parameters name the limiter to forget, as they do in rl_allow.
CREATE FUNCTION rl_reset(key text, algo text, "limit" bigint, "window" interval,
						 burst bigint DEFAULT NULL)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_status(
	OUT endpoint text,
	OUT connected boolean,
	OUT server_version text,
	OUT last_error text,
	OUT last_error_at timestamptz,
	OUT calls bigint,
	OUT allowed bigint,
	OUT denied bigint,
	OUT fail_open bigint,
	OUT fail_closed bigint,
	OUT failures bigint,
	OUT connects bigint,
	OUT script_loads bigint,
	OUT cached bigint,
	OUT redirects bigint,		-- cluster: MOVED and ASK replies followed
	OUT map_refreshes bigint)	-- cluster: slot maps fetched
RETURNS record
AS 'MODULE_PATHNAME', 'rl_status'
LANGUAGE C VOLATILE PARALLEL UNSAFE;


-- Batches (rl_allow_many): see "Burst (issue 14)" below.

-- Layered limits: every rule admits the call, or none is charged.
CREATE TYPE rl_rule AS (
	algo text,
	"limit" bigint,
	"window" interval
);

CREATE FUNCTION rl_allow_layered(key text, rules rl_rule[], cost bigint DEFAULT 1)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_allow_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_peek_layered(key text, rules rl_rule[])
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_peek_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_reset_layered(key text, rules rl_rule[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_reset_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Triggers: rl_throttle per row (BEFORE INSERT OR UPDATE ... FOR EACH ROW),
-- rl_throttle_statement per statement (AFTER INSERT OR UPDATE ...
-- REFERENCING NEW TABLE AS rl_new FOR EACH STATEMENT, or a BEFORE ... FOR
-- EACH ROW trigger that counts plus an AFTER ... FOR EACH STATEMENT one
-- that checks, with the same arguments).  Arguments: key columns, algo,
-- limit, window[, on_deny 'raise' | 'skip'[, cost column]][, 'burst=N'].
CREATE FUNCTION rl_throttle()
RETURNS trigger
AS 'MODULE_PATHNAME', 'rl_throttle'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_throttle_statement()
RETURNS trigger
AS 'MODULE_PATHNAME', 'rl_throttle_statement'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- PostgREST (rl_postgrest_guard): see "Burst (issue 14)" below.

-- Privileges.  Every function here consumes, reads or resets limiters
-- that other roles rely on, so none is executable by PUBLIC: whoever may
-- call rl_allow may spend any key's quota.  The administrator grants
-- them to the roles that need them (README, "Privileges").  Trigger
-- functions need EXECUTE only to create a trigger; the trigger then fires
-- for every role that may write the table.
REVOKE EXECUTE ON FUNCTION
	rl_reset(text, text, bigint, interval, bigint),
	rl_status(),
	rl_allow_layered(text, rl_rule[], bigint),
	rl_peek_layered(text, rl_rule[]),
	rl_reset_layered(text, rl_rule[]),
	rl_throttle(),
	rl_throttle_statement()
FROM PUBLIC;

-- Burst (issue 14)
--
-- token_bucket, leaky_bucket and gcra take a capacity (burst) apart from
-- their rate (limit per window); NULL keeps the capacity at the limit.
-- Not STRICT: a NULL argument raises an error instead of returning a NULL
-- row, which "IF NOT (rl_allow(...)).allowed" would silently let through.
CREATE FUNCTION rl_allow(key text, algo text, "limit" bigint, "window" interval,
						 cost bigint DEFAULT 1, burst bigint DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_allow'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_peek(key text, algo text, "limit" bigint, "window" interval,
						burst bigint DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_peek'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Batches: one row per key, in array order, all checks in one round trip.
CREATE FUNCTION rl_allow_many(keys text[], algo text, "limit" bigint,
							  "window" interval, cost bigint DEFAULT 1,
							  burst bigint DEFAULT NULL)
RETURNS TABLE(key text, allowed boolean, remaining bigint,
			  retry_after_ms bigint, reset_after_ms bigint)
AS 'MODULE_PATHNAME', 'rl_allow_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE FUNCTION rl_allow_many(keys text[], algo text, "limit" bigint,
							  "window" interval, costs bigint[],
							  burst bigint DEFAULT NULL)
RETURNS TABLE(key text, allowed boolean, remaining bigint,
			  retry_after_ms bigint, reset_after_ms bigint)
AS 'MODULE_PATHNAME', 'rl_allow_many'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

-- PostgREST: call from the db-pre-request function.  Denied requests get
-- HTTP 429 with Retry-After and RateLimit headers.
CREATE FUNCTION rl_postgrest_guard(algo text, "limit" bigint, "window" interval,
								   key text DEFAULT NULL,
								   burst bigint DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rl_postgrest_guard'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION
	rl_allow(text, text, bigint, interval, bigint, bigint),
	rl_peek(text, text, bigint, interval, bigint),
	rl_allow_many(text[], text, bigint, interval, bigint, bigint),
	rl_allow_many(text[], text, bigint, interval, bigint[], bigint),
	rl_postgrest_guard(text, bigint, interval, text, bigint)
FROM PUBLIC;

-- Layered rules with a burst.  rl_rule keeps its three attributes: a
-- fourth would make every ('gcra', 5, '1 second')::rl_rule written for
-- 0.2.0 an error ("Input has too few columns").
CREATE TYPE rl_burst_rule AS (
	algo text,
	"limit" bigint,
	"window" interval,
	burst bigint
);

CREATE FUNCTION rl_allow_layered(key text, rules rl_burst_rule[], cost bigint DEFAULT 1)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_allow_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_peek_layered(key text, rules rl_burst_rule[])
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_peek_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_reset_layered(key text, rules rl_burst_rule[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_reset_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION
	rl_allow_layered(text, rl_burst_rule[], bigint),
	rl_peek_layered(text, rl_burst_rule[]),
	rl_reset_layered(text, rl_burst_rule[])
FROM PUBLIC;

-- rl_acquire (issue 14)
--
-- Waits up to max_wait for the call to be admitted, sleeping for the
-- retry_after_ms of each denial (cancellable, and bounded by
-- statement_timeout), then consumes; after max_wait, the denial.
CREATE FUNCTION rl_acquire(key text, algo text, "limit" bigint, "window" interval,
						   cost bigint DEFAULT 1,
						   max_wait interval DEFAULT '1 second',
						   burst bigint DEFAULT NULL)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_acquire'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION
	rl_acquire(text, text, bigint, interval, bigint, interval, bigint)
FROM PUBLIC;

-- Server-wide statistics (issue 14)
--
-- Counts of every backend since the server started or rl_stats_reset(),
-- kept in shared memory (src/rl_stats.c).  Readable by pg_monitor, not by
-- PUBLIC; the limiter keys in rl_stats_limiters only by superusers and
-- members of pg_read_all_stats (others see NULL).  rl_stats_reset() is
-- granted to nobody: superusers only, unless they grant it.
CREATE FUNCTION rl_stats(
	OUT calls bigint,
	OUT allowed bigint,
	OUT denied bigint,
	OUT shadow_denied bigint,
	OUT cached bigint,
	OUT fail_open bigint,
	OUT fail_closed bigint,
	OUT fail_local bigint,
	OUT refunds bigint,
	OUT refunds_lost bigint,
	OUT failures bigint,
	OUT failures_timeout bigint,
	OUT failures_connect bigint,
	OUT failures_refused bigint,
	OUT failures_misconfigured bigint,
	OUT failures_protocol bigint,
	OUT failures_lost bigint,
	OUT failures_unavailable bigint,
	OUT connects bigint,
	OUT script_loads bigint,
	OUT redirects bigint,
	OUT round_trips bigint,
	OUT rtt_p50_ms double precision,
	OUT rtt_p99_ms double precision,
	OUT rtt_p999_ms double precision,
	OUT limiters_evicted bigint,
	OUT limiters bigint,
	OUT stats_reset timestamptz)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_stats'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_stats_rtt(OUT lower_us bigint, OUT upper_us bigint,
							 OUT round_trips bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_stats_rtt'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_stats_limiters(OUT key text, OUT algorithm text,
								  OUT denied bigint,
								  OUT last_denied timestamptz)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_stats_limiters'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_stats_reset()
RETURNS void
AS 'MODULE_PATHNAME', 'rl_stats_reset'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW rl_stats AS SELECT * FROM rl_stats();
CREATE VIEW rl_stats_rtt AS SELECT * FROM rl_stats_rtt();
CREATE VIEW rl_stats_limiters AS SELECT * FROM rl_stats_limiters();

REVOKE EXECUTE ON FUNCTION rl_stats(), rl_stats_rtt(), rl_stats_limiters(),
	rl_stats_reset() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_stats(), rl_stats_rtt(), rl_stats_limiters()
	TO pg_monitor;
GRANT SELECT ON rl_stats, rl_stats_rtt, rl_stats_limiters TO pg_monitor;

-- Named policies (issue 24)
--
-- A policy is a limiter's parameters kept as data: a row of rl_policies,
-- changed with an UPDATE, read by the calls by name through a cache in
-- each backend that the table's triggers invalidate (src/rl_policies.c).
-- A policy's limiter is its key and the policy's name and algorithm, not
-- its limit, window or burst: changing those keeps each key's state;
-- changing its algorithm starts every key afresh.  A row is checked when
-- written with the rules and SQLSTATEs of a call's arguments.  The owner
-- writes the table; anyone may read it (a limit is no secret to those
-- who are held to it).  Kept by pg_dump as the extension's configuration.
-- refund_on_abort (0.6.0): what a call by the policy's name took is given
-- back when the caller's transaction or savepoint aborts (src/rl_refund.c).
CREATE TABLE rl_policies (
	name text COLLATE "C" CONSTRAINT rl_policies_pkey PRIMARY KEY,
	algo text NOT NULL,
	"limit" bigint NOT NULL,
	"window" interval NOT NULL,
	burst bigint,
	enforce boolean NOT NULL DEFAULT true,
	failure_mode text,
	description text,
	refund_on_abort boolean NOT NULL DEFAULT false
);
SELECT pg_catalog.pg_extension_config_dump('rl_policies', '');

CREATE FUNCTION rl_policies_check()
RETURNS trigger
AS 'MODULE_PATHNAME', 'rl_policies_check'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_policies_changed()
RETURNS trigger
AS 'MODULE_PATHNAME', 'rl_policies_changed'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE TRIGGER rl_policies_check BEFORE INSERT OR UPDATE ON rl_policies
	FOR EACH ROW EXECUTE FUNCTION rl_policies_check();
CREATE TRIGGER rl_policies_changed AFTER DELETE OR TRUNCATE ON rl_policies
	FOR EACH STATEMENT EXECUTE FUNCTION rl_policies_changed();

REVOKE ALL ON rl_policies FROM PUBLIC;
GRANT SELECT ON rl_policies TO PUBLIC;

-- The calls by name return what the parameter forms return; an unknown
-- policy is an ERROR with SQLSTATE RL404.
CREATE FUNCTION rl_allow(key text, policy text, cost bigint DEFAULT 1)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_allow_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_peek(key text, policy text)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_peek_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_reset(key text, policy text)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_reset_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION
	rl_policies_check(),
	rl_policies_changed(),
	rl_allow(text, text, bigint),
	rl_peek(text, text),
	rl_reset(text, text)
FROM PUBLIC;

-- Batches by policy name.  A NULL or quoted third argument fits both
-- cost forms: cast it (NULL::bigint), as with the parameter forms.
CREATE FUNCTION rl_allow_many(keys text[], policy text, cost bigint DEFAULT 1)
RETURNS TABLE(key text, allowed boolean, remaining bigint,
			  retry_after_ms bigint, reset_after_ms bigint)
AS 'MODULE_PATHNAME', 'rl_allow_many_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

CREATE FUNCTION rl_allow_many(keys text[], policy text, costs bigint[])
RETURNS TABLE(key text, allowed boolean, remaining bigint,
			  retry_after_ms bigint, reset_after_ms bigint)
AS 'MODULE_PATHNAME', 'rl_allow_many_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE ROWS 100;

-- rl_acquire by policy name: max_wait first and required, so that a call
-- with a number or an interval in third or fourth place cannot mean the
-- parameter form rl_acquire(key, algo, limit, window).
CREATE FUNCTION rl_acquire(key text, policy text, max_wait interval,
						   cost bigint DEFAULT 1)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_acquire_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- Layered checks over policies: each policy once, all admit or none is
-- charged.
CREATE FUNCTION rl_allow_layered(key text, policies text[], cost bigint DEFAULT 1)
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_allow_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_peek_layered(key text, policies text[])
RETURNS rl_result
AS 'MODULE_PATHNAME', 'rl_peek_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_reset_layered(key text, policies text[])
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_reset_layered'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- PostgREST by policy name; the RateLimit fields name the policy.
CREATE FUNCTION rl_postgrest_guard(policy text, key text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'rl_postgrest_guard_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

-- The triggers take 'policy=NAME' in place of algo, limit and window:
-- key columns, 'policy=NAME'[, on_deny[, cost column]].

-- Statistics per policy: this database's policies called since the
-- server started (ratelimit.max_policies of them at most, in all
-- databases), with the counts since then or rl_stats_reset().
CREATE FUNCTION rl_stats_policies(
	OUT policy text,
	OUT calls bigint,
	OUT allowed bigint,
	OUT denied bigint,
	OUT shadow_denied bigint,
	OUT fail_open bigint,
	OUT fail_closed bigint,
	OUT fail_error bigint,
	OUT fail_local bigint)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_stats_policies'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE VIEW rl_stats_policies AS SELECT * FROM rl_stats_policies();

REVOKE EXECUTE ON FUNCTION
	rl_allow_many(text[], text, bigint),
	rl_allow_many(text[], text, bigint[]),
	rl_acquire(text, text, interval, bigint),
	rl_allow_layered(text, text[], bigint),
	rl_peek_layered(text, text[]),
	rl_reset_layered(text, text[]),
	rl_postgrest_guard(text, text),
	rl_stats_policies()
FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_stats_policies() TO pg_monitor;
GRANT SELECT ON rl_stats_policies TO pg_monitor;

-- rl_ping: the verification step (issue 27)
--
-- Connects now and has each Redis server answer (standalone: the server;
-- Sentinel: the master they name; Cluster: every master of the slot map),
-- a row per server with its product, version and round trip; an ERROR
-- (SQLSTATE class 08) names the server that cannot be used, what failed
-- and the setting to fix, whatever ratelimit.failure_mode.  On the local
-- engine one row says so.  For pg_monitor, not PUBLIC: it opens
-- connections to Redis.
CREATE FUNCTION rl_ping(
	OUT engine text,
	OUT mode text,
	OUT endpoint text,
	OUT server text,
	OUT version text,
	OUT rtt_ms double precision)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'rl_ping'
LANGUAGE C VOLATILE PARALLEL UNSAFE
ROWS 3;

REVOKE ALL ON FUNCTION rl_ping() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION rl_ping() TO pg_monitor;

-- Concurrency held for the session (issue 25)
--
-- A concurrency check (algo 'concurrency') holds its slot until its
-- transaction ends.  rl_hold takes one that outlives the transaction, for
-- work that spans several: it is released by rl_release(holder), at the
-- backend's exit, or, if neither comes, when its lease (the window) ends.
-- holder is a number of the session's (NULL when nothing was taken).
CREATE FUNCTION rl_hold(key text, "limit" bigint, "window" interval,
						cost bigint DEFAULT 1,
						OUT allowed boolean, OUT holder bigint,
						OUT remaining bigint, OUT retry_after_ms bigint,
						OUT reset_after_ms bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_hold'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_hold(key text, policy text, cost bigint DEFAULT 1,
						OUT allowed boolean, OUT holder bigint,
						OUT remaining bigint, OUT retry_after_ms bigint,
						OUT reset_after_ms bigint)
RETURNS record
AS 'MODULE_PATHNAME', 'rl_hold_policy'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

CREATE FUNCTION rl_release(holder bigint)
RETURNS boolean
AS 'MODULE_PATHNAME', 'rl_release'
LANGUAGE C VOLATILE PARALLEL UNSAFE;

REVOKE EXECUTE ON FUNCTION rl_hold(text, bigint, interval, bigint),
	rl_hold(text, text, bigint), rl_release(bigint) FROM PUBLIC;
