--
-- refunds: what an aborted transaction or savepoint gives back (issue 25;
-- doc/refunds.md).  The model of a refund is the limiter that never saw
-- the call: for each of the six algorithms a script of calls runs on a
-- key R, whose aborted calls are refunded, and the same calls but the
-- aborted ones on a twin key T; after each part both are peeked at seven
-- times across the next two windows, and every difference is printed.
-- The script aborts a transaction, savepoints nested 3 deep, a PL/pgSQL
-- block that caught an error, a transaction whose refund comes later in
-- the window and one whose window has ended, and a bucket that refilled
-- meanwhile (whose refund must not give the room twice).  Then: who
-- decides (the setting, a policy's column, the triggers' option),
-- committed work is never refunded, a statement trigger's statement that
-- aborts after its check, the counters, and both engines.
--
LOAD 'ratelimit';
SET ratelimit.test_clock_ms = 1800000000000;

CREATE FUNCTION rf_clock(ms bigint) RETURNS void
LANGUAGE sql AS $$
	SELECT set_config('ratelimit.test_clock_ms', (1800000000000 + ms)::text, false)
$$;
-- A call on the real key (R) or the twin (T): limit 10 per 10 s.
CREATE FUNCTION rf_do(which text, algo text, cost bigint) RETURNS boolean
LANGUAGE sql AS $$
	SELECT (rl_allow(current_setting('ratelimit.engine') || ':' || which || ':' || algo,
					 algo, 10, '10 s', cost)).allowed
$$;
-- A PL/pgSQL block that takes and then fails: its subtransaction aborts.
CREATE FUNCTION rf_caught(which text, algo text, cost bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM rf_do(which, algo, cost);
	RAISE EXCEPTION 'undone';
EXCEPTION WHEN raise_exception THEN
	NULL;
END $$;

-- Both keys peeked at seven times from at_ms on, into rf_peeks; the
-- clock is set back to at_ms.
CREATE TABLE rf_peeks (engine text, algo text, part text, at_ms bigint,
	which text, remaining bigint, retry bigint, reset bigint);
CREATE FUNCTION rf_snap(algo text, part text, at_ms bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
	off bigint;
	w text;
	r record;
BEGIN
	FOREACH off IN ARRAY ARRAY[0, 700, 3000, 9999, 10000, 12500, 20001] LOOP
		PERFORM rf_clock(at_ms + off);
		FOREACH w IN ARRAY ARRAY['R', 'T'] LOOP
			SELECT * INTO r FROM rl_peek(current_setting('ratelimit.engine') || ':' || w || ':' || algo,
										 algo, 10, '10 s');
			INSERT INTO rf_peeks VALUES (current_setting('ratelimit.engine'), algo,
				part, at_ms + off, w, r.remaining, r.retry_after_ms, r.reset_after_ms);
		END LOOP;
	END LOOP;
	PERFORM rf_clock(at_ms);
END $$;

-- The script, one statement per row, %1$s the algorithm; \gexec runs the
-- rows in order, so transactions and savepoints are real.
CREATE TABLE rf_script (n serial, cmd text);
INSERT INTO rf_script (cmd) VALUES
	-- 1. a transaction that aborts
	('SELECT rf_clock(0)'),
	('SELECT rf_do(''R'', %1$L, 2), rf_do(''T'', %1$L, 2)'),
	('SELECT rf_clock(100)'),
	('BEGIN'),
	('SELECT rf_do(''R'', %1$L, 3)'),
	('ROLLBACK'),
	('SELECT rf_snap(%1$L, ''1 rollback'', 100)'),
	-- 2. savepoints nested 3 deep: ROLLBACK TO b gives back b's and c's
	('SELECT rf_clock(200)'),
	('BEGIN'),
	('SELECT rf_do(''R'', %1$L, 1), rf_do(''T'', %1$L, 1)'),
	('SAVEPOINT a'),
	('SELECT rf_do(''R'', %1$L, 2), rf_do(''T'', %1$L, 2)'),
	('SAVEPOINT b'),
	('SELECT rf_do(''R'', %1$L, 1)'),
	('SAVEPOINT c'),
	('SELECT rf_do(''R'', %1$L, 1)'),
	('ROLLBACK TO SAVEPOINT b'),
	('SELECT rf_do(''R'', %1$L, 1), rf_do(''T'', %1$L, 1)'),
	('RELEASE SAVEPOINT a'),
	('COMMIT'),
	('SELECT rf_snap(%1$L, ''2 savepoints'', 200)'),
	-- 3. a PL/pgSQL block that caught its error
	('SELECT rf_clock(300)'),
	('SELECT rf_caught(''R'', %1$L, 2)'),
	('SELECT rf_snap(%1$L, ''3 exception block'', 300)'),
	-- 4. released savepoints pass their refunds up; the abort comes later
	('SELECT rf_clock(400)'),
	('BEGIN'),
	('SELECT rf_do(''R'', %1$L, 1)'),
	('SAVEPOINT s'),
	('SELECT rf_do(''R'', %1$L, 1)'),
	('RELEASE SAVEPOINT s'),
	('SELECT rf_clock(5000)'),
	('ROLLBACK'),
	('SELECT rf_snap(%1$L, ''4 later abort'', 5000)'),
	-- 5. the abort after the window charged has ended
	('SELECT rf_clock(8000)'),
	('BEGIN'),
	('SELECT rf_do(''R'', %1$L, 2)'),
	('SELECT rf_clock(12000)'),
	('ROLLBACK'),
	('SELECT rf_snap(%1$L, ''5 after the window'', 12000)'),
	-- 6. a full take, refilled by the time it is refunded, with a take
	-- not refunded in between: the refund gives back only what the
	-- refill has not (a bucket must not give the room twice)
	('SELECT rf_clock(20000)'),
	('BEGIN'),
	('SELECT rf_do(''R'', %1$L, 10)'),
	('SET LOCAL ratelimit.refund_on_abort = off'),
	('SELECT rf_clock(40000)'),
	('SELECT rf_do(''R'', %1$L, 10), rf_do(''T'', %1$L, 10)'),
	('SELECT rf_clock(40500)'),
	('ROLLBACK'),
	('SELECT rf_snap(%1$L, ''6 refilled'', 40500)');

SET ratelimit.refund_on_abort = on;
\set ECHO none
\o /dev/null
SELECT format(cmd, a) FROM unnest(ARRAY['fixed_window', 'sliding_log',
	'sliding_counter', 'token_bucket', 'leaky_bucket', 'gcra']) a,
	rf_script ORDER BY a, n \gexec
\o
\set ECHO all

-- Every part's peeks: R and T must agree everywhere.
SELECT algo, part, count(*) AS peeks,
	count(*) FILTER (WHERE r.remaining <> t.remaining OR r.retry <> t.retry
					 OR r.reset <> t.reset) AS differ
FROM rf_peeks r JOIN rf_peeks t USING (engine, algo, part, at_ms)
WHERE r.which = 'R' AND t.which = 'T'
GROUP BY algo, part ORDER BY algo, part;
SELECT algo, part, at_ms, r.remaining, t.remaining AS twin_remaining,
	r.retry, t.retry AS twin_retry, r.reset, t.reset AS twin_reset
FROM rf_peeks r JOIN rf_peeks t USING (engine, algo, part, at_ms)
WHERE r.which = 'R' AND t.which = 'T'
	AND (r.remaining <> t.remaining OR r.retry <> t.retry OR r.reset <> t.reset)
ORDER BY algo, part, at_ms;
-- The refunds gave something back: R's calls were not all free.
SELECT algo, min(remaining) AS min_remaining, max(remaining) AS max_remaining
FROM rf_peeks WHERE which = 'R' GROUP BY algo ORDER BY algo;

-- Who decides.  The parameter forms follow ratelimit.refund_on_abort
-- (off by default; superuser only), a policy its refund_on_abort column.
RESET ratelimit.refund_on_abort;
SELECT rf_clock(0);
BEGIN;
SELECT allowed FROM rl_allow('who:param', 'fixed_window', 10, '1 hour', 4);
ROLLBACK;
SELECT remaining FROM rl_peek('who:param', 'fixed_window', 10, '1 hour');
INSERT INTO rl_policies (name, algo, "limit", "window", refund_on_abort) VALUES
	('rf.on', 'fixed_window', 10, '1 hour', true),
	('rf.off', 'fixed_window', 10, '1 hour', DEFAULT);
SELECT name, refund_on_abort FROM rl_policies WHERE name LIKE 'rf.%' ORDER BY name;
BEGIN;
SELECT allowed FROM rl_allow('who:policy', 'rf.on', 4);
SELECT allowed FROM rl_allow('who:policy', 'rf.off', 4);
SELECT count(*) FROM rl_allow_many(ARRAY['who:m1', 'who:m2'], 'rf.on', 2);
SELECT allowed FROM rl_allow_layered('who:layered', ARRAY['rf.on', 'rf.off'], 3);
ROLLBACK;
SELECT p, k, remaining FROM (VALUES ('rf.on', 'who:policy'), ('rf.off', 'who:policy'),
	('rf.on', 'who:m1'), ('rf.on', 'who:m2'), ('rf.on', 'who:layered'),
	('rf.off', 'who:layered')) v(p, k), rl_peek(k, p) ORDER BY p, k;
-- Committed work is never refunded, nor a refund given twice.
BEGIN;
SELECT allowed FROM rl_allow('who:commit', 'rf.on', 4);
SAVEPOINT a;
SELECT allowed FROM rl_allow('who:commit', 'rf.on', 1);
ROLLBACK TO SAVEPOINT a;
ROLLBACK TO SAVEPOINT a;
COMMIT;
SELECT remaining FROM rl_peek('who:commit', 'rf.on');
-- A denial took nothing, and gives nothing back.
BEGIN;
SELECT allowed FROM rl_allow('who:commit', 'rf.on', 7);
ROLLBACK;
SELECT remaining FROM rl_peek('who:commit', 'rf.on');
-- A plain role may not change the setting.
CREATE ROLE regress_rl_refund_plain;
SET ROLE regress_rl_refund_plain;
SET ratelimit.refund_on_abort = on;
RESET ROLE;
DROP ROLE regress_rl_refund_plain;

-- The triggers refund by default; refund=off keeps the charge; a bad
-- value is refused when the trigger is created.
CREATE TABLE rf_rows (k int, v int);
CREATE TRIGGER rf_rows_limit BEFORE INSERT ON rf_rows FOR EACH ROW
	EXECUTE FUNCTION rl_throttle('k', 'fixed_window', '10', '1 hour');
CREATE TABLE rf_rows_off (k int, v int);
CREATE TRIGGER rf_rows_off_limit BEFORE INSERT ON rf_rows_off FOR EACH ROW
	EXECUTE FUNCTION rl_throttle('k', 'fixed_window', '10', '1 hour', 'refund=off');
CREATE TABLE rf_stmt (k int, v int);
CREATE TRIGGER rf_stmt_limit AFTER INSERT ON rf_stmt REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('k', 'fixed_window', '10', '1 hour');
CREATE TABLE rf_pol (k int, v int);
CREATE TRIGGER rf_pol_limit BEFORE INSERT ON rf_pol FOR EACH ROW
	EXECUTE FUNCTION rl_throttle('k', 'policy=rf.off');
CREATE TABLE rf_bad (k int);
CREATE TRIGGER rf_bad_limit BEFORE INSERT ON rf_bad FOR EACH ROW
	EXECUTE FUNCTION rl_throttle('k', 'fixed_window', '10', '1 hour', 'refund=maybe');
-- Rows of a statement that aborts later (a constraint fails after the
-- check) are given back, by both triggers.
ALTER TABLE rf_rows ADD CONSTRAINT rf_rows_v CHECK (v < 4);
ALTER TABLE rf_rows_off ADD CONSTRAINT rf_rows_off_v CHECK (v < 4);
CREATE FUNCTION rf_fail() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'after the check';
END $$;
CREATE TRIGGER rf_stmt_fail AFTER INSERT ON rf_stmt FOR EACH STATEMENT
	EXECUTE FUNCTION rf_fail();
INSERT INTO rf_rows SELECT 1, g FROM generate_series(1, 5) g;
INSERT INTO rf_rows_off SELECT 1, g FROM generate_series(1, 5) g;
INSERT INTO rf_stmt SELECT 1, g FROM generate_series(1, 5) g;
INSERT INTO rf_pol SELECT 1, g FROM generate_series(1, 3) g;
BEGIN;
INSERT INTO rf_rows SELECT 1, g FROM generate_series(1, 2) g;
INSERT INTO rf_pol SELECT 1, g FROM generate_series(1, 2) g;
ROLLBACK;
SELECT t, remaining FROM (VALUES ('rf_rows'), ('rf_rows_off'), ('rf_stmt')) v(t),
	rl_peek('public.' || t || ':k=''1''', 'fixed_window', 10, '1 hour') ORDER BY t;
SELECT remaining FROM rl_peek('public.rf_pol:k=''1''', 'rf.off');

-- The counters.
SELECT refunds > 0 AS refunded, refunds_lost FROM rl_stats;

-- The same on the local engine.
SET ratelimit.engine = local;
SET ratelimit.refund_on_abort = on;
\set ECHO none
\o /dev/null
SELECT format(cmd, a) FROM unnest(ARRAY['fixed_window', 'sliding_log',
	'sliding_counter', 'token_bucket', 'leaky_bucket', 'gcra']) a,
	rf_script ORDER BY a, n \gexec
\o
\set ECHO all
SELECT engine, count(*) AS peeks,
	count(*) FILTER (WHERE r.remaining <> t.remaining OR r.retry <> t.retry
					 OR r.reset <> t.reset) AS differ
FROM rf_peeks r JOIN rf_peeks t USING (engine, algo, part, at_ms)
WHERE r.which = 'R' AND t.which = 'T'
GROUP BY engine ORDER BY engine;
SELECT algo, part, at_ms, r.remaining, t.remaining AS twin_remaining,
	r.retry, t.retry AS twin_retry, r.reset, t.reset AS twin_reset
FROM rf_peeks r JOIN rf_peeks t USING (engine, algo, part, at_ms)
WHERE r.which = 'R' AND t.which = 'T' AND engine = 'local'
	AND (r.remaining <> t.remaining OR r.retry <> t.retry OR r.reset <> t.reset)
ORDER BY algo, part, at_ms;
-- Redis and the local engine gave the same answers.
SELECT count(*) AS compared,
	count(*) FILTER (WHERE l.remaining <> r.remaining OR l.retry <> r.retry
					 OR l.reset <> r.reset) AS differ
FROM rf_peeks l JOIN rf_peeks r USING (algo, part, at_ms, which)
WHERE l.engine = 'local' AND r.engine = 'redis';
BEGIN;
SELECT allowed FROM rl_allow('who:local', 'rf.on', 4);
ROLLBACK;
SELECT remaining FROM rl_peek('who:local', 'rf.on');
RESET ratelimit.engine;
RESET ratelimit.refund_on_abort;

DELETE FROM rl_policies WHERE name LIKE 'rf.%';
DROP TABLE rf_rows, rf_rows_off, rf_stmt, rf_pol, rf_bad, rf_peeks, rf_script;
DROP FUNCTION rf_fail(), rf_clock(bigint), rf_do(text, text, bigint),
	rf_caught(text, text, bigint), rf_snap(text, text, bigint);
