--
-- rl_throttle (row trigger) and rl_throttle_statement (statement trigger)
--
-- Tables of this suite start with "trig_", so its limiter keys start with
-- "public.trig_".  pg_regress creates the database afresh and its OID is
-- part of every Redis key, so no state of an earlier run can leak in.
--
-- The clock is pinned at 1700000000000 ms, 20 s into a minute.
SET ratelimit.test_clock_ms = 1700000000000;

-- Runs a statement and shows the error it raises, field by field.
CREATE FUNCTION trig_error(query text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
	state text;
	message text;
	detail text;
	hint text;
BEGIN
	EXECUTE query;
	RETURN NEXT 'no error';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
	RETURN NEXT 'sqlstate: ' || state;
	RETURN NEXT 'message:  ' || message;
	IF detail <> '' THEN RETURN NEXT 'detail:   ' || detail; END IF;
	IF hint <> '' THEN RETURN NEXT 'hint:     ' || hint; END IF;
END $$;

-- A trigger's state, peeked: the key is the table and the key columns
-- with their values, and the trigger's rule names the Redis key.
CREATE FUNCTION trig_peek(key text, algo text, "limit" bigint, "window" interval)
RETURNS rl_result
LANGUAGE sql AS $$
	SELECT * FROM rl_peek_layered(key, ARRAY[(algo, "limit", "window")]::rl_rule[])
$$;

--
-- Row trigger, on_deny 'raise' (the default)
--
CREATE TABLE trig_comments (id serial, author_id int, body text);
CREATE TRIGGER trig_comments_throttle BEFORE INSERT ON trig_comments
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author_id', 'sliding_log', '3', '1 minute');

INSERT INTO trig_comments (author_id, body) VALUES (1, 'one'), (1, 'two');
INSERT INTO trig_comments (author_id, body) VALUES (1, 'three');
-- The fourth comment in the minute: the error names the limit, the key
-- and the wait (the oldest entry leaves the log in 60000 ms).
INSERT INTO trig_comments (author_id, body) VALUES (1, 'four');
SELECT * FROM trig_error($$INSERT INTO trig_comments (author_id, body) VALUES (1, 'four')$$);
-- Another author has a limiter of its own.
INSERT INTO trig_comments (author_id, body) VALUES (2, 'hello');
SELECT author_id, count(*) FROM trig_comments GROUP BY 1 ORDER BY 1;
SELECT * FROM trig_peek('public.trig_comments:author_id=''1''', 'sliding_log', 3, '1 minute');

-- A multi-row statement fails at the row that goes over: none of its
-- rows is stored, and the rows checked before it are given back when the
-- statement's work is rolled back (refunds, on by default since 0.6.0).
SELECT * FROM trig_error($$INSERT INTO trig_comments (author_id, body)
	SELECT 3, 'bulk ' || g FROM generate_series(1, 5) g$$);
SELECT count(*) FROM trig_comments WHERE author_id = 3;
SELECT * FROM trig_peek('public.trig_comments:author_id=''3''', 'sliding_log', 3, '1 minute');

-- A rollback gives back what the rows were charged.
BEGIN;
INSERT INTO trig_comments (author_id, body) VALUES (4, 'rolled back');
ROLLBACK;
SELECT * FROM trig_peek('public.trig_comments:author_id=''4''', 'sliding_log', 3, '1 minute');

-- Two tables with the same trigger do not share a limiter.
CREATE TABLE trig_posts (id serial, author_id int, body text);
CREATE TRIGGER trig_posts_throttle BEFORE INSERT ON trig_posts
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author_id', 'sliding_log', '3', '1 minute');
INSERT INTO trig_posts (author_id, body) VALUES (1, 'a post');
SELECT * FROM trig_peek('public.trig_posts:author_id=''1''', 'sliding_log', 3, '1 minute');

-- A row trigger on a partitioned table fires in each partition, but all
-- partitions, at any depth, share the parent table's limiter.
CREATE TABLE trig_events (author_id int, day int) PARTITION BY LIST (day);
CREATE TABLE trig_events_1 PARTITION OF trig_events FOR VALUES IN (1);
CREATE TABLE trig_events_2 PARTITION OF trig_events FOR VALUES IN (2)
	PARTITION BY LIST (author_id);
CREATE TABLE trig_events_2x PARTITION OF trig_events_2 DEFAULT;
CREATE TRIGGER trig_events_throttle BEFORE INSERT ON trig_events
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author_id', 'fixed_window', '3', '1 minute');
INSERT INTO trig_events VALUES (1, 1), (1, 2);
INSERT INTO trig_events_2x VALUES (1, 2);
SELECT * FROM trig_error($$INSERT INTO trig_events_1 VALUES (1, 1)$$);
SELECT * FROM trig_peek('public.trig_events:author_id=''1''', 'fixed_window', 3, '1 minute');

-- Time passes: a minute after the first comments, author 1 may write again.
SET ratelimit.test_clock_ms = 1700000060001;
INSERT INTO trig_comments (author_id, body) VALUES (1, 'a minute later');
SET ratelimit.test_clock_ms = 1700000000000;

--
-- on_deny 'skip': rows over the limit are dropped silently
--
CREATE TABLE trig_likes (post_id int, user_id int);
CREATE TRIGGER trig_likes_throttle BEFORE INSERT ON trig_likes
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('user_id', 'fixed_window', '2', '1 minute', 'skip');
INSERT INTO trig_likes SELECT g, 7 FROM generate_series(1, 5) g;
INSERT INTO trig_likes VALUES (6, 8);
SELECT * FROM trig_likes ORDER BY post_id;

--
-- Several key columns; values are quoted, so no two rows share a key by
-- accident ('a,b' + 'c' is not 'a' + 'b,c'; NULL is not 'NULL')
--
CREATE TABLE trig_multi (tenant text, author text, n int);
CREATE TRIGGER trig_multi_throttle BEFORE INSERT ON trig_multi
	FOR EACH ROW EXECUTE FUNCTION rl_throttle(' tenant , "author" ', 'gcra', '1', '1 hour');
INSERT INTO trig_multi VALUES ('a,b', 'c', 1), ('a', 'b,c', 2), (NULL, 'x', 3), ('NULL', 'x', 4),
	('it''s', 'x', 5), (E'back\\slash', 'x', 6);
SELECT * FROM trig_error($$INSERT INTO trig_multi VALUES (NULL, 'x', 7)$$);
SELECT * FROM trig_error($$INSERT INTO trig_multi VALUES ('it''s', 'x', 8)$$);
SELECT * FROM trig_peek('public.trig_multi:tenant=''a,b'',author=''c''', 'gcra', 1, '1 hour');
SELECT * FROM trig_peek(E'public.trig_multi:tenant=E''back\\\\slash'',author=''x''', 'gcra', 1, '1 hour');
SELECT count(*) FROM trig_multi;

--
-- A cost column; UPDATE is throttled too
--
CREATE TABLE trig_uploads (owner int, megabytes int);
CREATE TRIGGER trig_uploads_throttle BEFORE INSERT OR UPDATE ON trig_uploads
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('owner', 'token_bucket', '10', '1 hour', 'raise', 'megabytes');
INSERT INTO trig_uploads VALUES (1, 4), (1, 4);
-- 2 left; 4 more need 2 more tokens, 2 x 360000 ms of refill.
SELECT * FROM trig_error($$INSERT INTO trig_uploads VALUES (1, 4)$$);
-- Cost 0 passes without asking Redis; UPDATE charges the new row.
INSERT INTO trig_uploads VALUES (1, 0);
UPDATE trig_uploads SET megabytes = 2 WHERE megabytes = 0;
SELECT * FROM trig_peek('public.trig_uploads:owner=''1''', 'token_bucket', 10, '1 hour');
SELECT * FROM trig_error($$INSERT INTO trig_uploads VALUES (2, NULL)$$);
SELECT * FROM trig_error($$INSERT INTO trig_uploads VALUES (2, -1)$$);
SELECT * FROM trig_error($$INSERT INTO trig_uploads VALUES (2, 11)$$);
SELECT * FROM trig_peek('public.trig_uploads:owner=''2''', 'token_bucket', 10, '1 hour');

--
-- Bad trigger definitions are refused when the trigger is created, or,
-- for the way it fires, when it first fires
--
CREATE TABLE trig_bad (a int, b text);
CREATE FUNCTION trig_try(args text, timing text DEFAULT 'BEFORE INSERT',
						 level text DEFAULT 'ROW', fn text DEFAULT 'rl_throttle',
						 referencing text DEFAULT '',
						 dml text DEFAULT $q$INSERT INTO trig_bad VALUES (1, 'x')$q$)
RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
	created text[];
BEGIN
	created := ARRAY(SELECT trig_error(format('CREATE TRIGGER trig_bad_t %s ON trig_bad %s FOR EACH %s EXECUTE FUNCTION %s(%s)',
											   timing, referencing, level, fn, args)));
	IF created <> ARRAY['no error'] THEN
		RETURN QUERY SELECT 'at create: ' || unnest(created);
		RETURN;
	END IF;
	RETURN QUERY SELECT * FROM trig_error(dml);
	EXECUTE 'DROP TRIGGER trig_bad_t ON trig_bad';
END $$;
SELECT * FROM trig_try($$'a', 'gcra', '1'$$);
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s', 'raise', 'b', 'extra'$$);
SELECT * FROM trig_try($$'', 'gcra', '1', '1 s'$$);
SELECT * FROM trig_try($$'a,', 'gcra', '1', '1 s'$$);
SELECT * FROM trig_try($$'a,nope', 'gcra', '1', '1 s'$$);
SELECT * FROM trig_try($$'A', 'gcra', '1', '1 s'$$);
SELECT * FROM trig_try($$'ctid', 'gcra', '1', '1 s'$$);
SELECT * FROM trig_try($$'a, a', 'gcra', '1', '1 s'$$);
SELECT * FROM trig_try($$'a', 'GCRA', '1', '1 s'$$);
SELECT * FROM trig_try($$'a', 'gcra', 'ten', '1 s'$$);
SELECT * FROM trig_try($$'a', 'gcra', '0', '1 s'$$);
SELECT * FROM trig_try($$'a', 'gcra', '99999999999999999999', '1 s'$$);
SELECT * FROM trig_try($$'a', 'gcra', '1', 'soon'$$);
SELECT * FROM trig_try($$'a', 'gcra', '1', '0 s'$$);
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s', 'ignore'$$);
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s', 'raise', 'b'$$);
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s', 'raise', 'nope'$$);
-- Fired the wrong way.
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s'$$, 'BEFORE INSERT', 'STATEMENT');
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s'$$, 'BEFORE INSERT', 'ROW', 'rl_throttle_statement');
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s'$$, 'AFTER INSERT', 'STATEMENT', 'rl_throttle_statement');
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s', 'skip'$$, 'AFTER INSERT', 'STATEMENT',
					   'rl_throttle_statement', 'REFERENCING NEW TABLE AS rl_new');
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s'$$, 'AFTER INSERT', 'STATEMENT',
					   'rl_throttle', 'REFERENCING NEW TABLE AS rl_new');
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s'$$, 'AFTER DELETE', 'STATEMENT',
					   'rl_throttle_statement', 'REFERENCING OLD TABLE AS rl_old', 'DELETE FROM trig_bad');
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s'$$, 'BEFORE DELETE', 'ROW', 'rl_throttle', '',
					   'DELETE FROM trig_bad');
-- Not a trigger call at all.
SELECT * FROM trig_error($$SELECT rl_throttle()$$);
-- A key longer than 1024 bytes.
CREATE TRIGGER trig_bad_long BEFORE INSERT ON trig_bad
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('b', 'gcra', '1', '1 s');
SELECT * FROM trig_error($$INSERT INTO trig_bad VALUES (1, repeat('x', 1100))$$);
DROP TRIGGER trig_bad_long ON trig_bad;

--
-- Statement trigger: all rows of a statement in one check, all or nothing
--
CREATE TABLE trig_bulk (id serial, author_id int, body text);
CREATE TRIGGER trig_bulk_throttle AFTER INSERT ON trig_bulk
	REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '5', '1 minute');
-- 3 rows for author 1, 2 for author 2: cost 3 and 2.
INSERT INTO trig_bulk (author_id, body) SELECT 1 + g % 2, 'row ' || g FROM generate_series(0, 4) g;
SELECT * FROM trig_peek('public.trig_bulk:author_id=''1''', 'fixed_window', 5, '1 minute');
SELECT * FROM trig_peek('public.trig_bulk:author_id=''2''', 'fixed_window', 5, '1 minute');
-- 3 more for author 1 (6 > 5) and 1 for author 2: the statement fails, and
-- author 2 is not charged either.
SELECT * FROM trig_error($$INSERT INTO trig_bulk (author_id, body)
	VALUES (1, 'x'), (2, 'y'), (1, 'x'), (1, 'x')$$);
SELECT * FROM trig_peek('public.trig_bulk:author_id=''2''', 'fixed_window', 5, '1 minute');
SELECT author_id, count(*) FROM trig_bulk GROUP BY 1 ORDER BY 1;
-- More rows for one key than the limit: refused before Redis is asked.
SELECT * FROM trig_error($$INSERT INTO trig_bulk (author_id, body)
	SELECT 9, 'many' FROM generate_series(1, 6)$$);
SELECT * FROM trig_peek('public.trig_bulk:author_id=''9''', 'fixed_window', 5, '1 minute');
-- COPY goes through the same check.
COPY trig_bulk (author_id, body) FROM STDIN;
3	copied 1
3	copied 2
4	copied 3
3	copied 4
\.
SELECT * FROM trig_peek('public.trig_bulk:author_id=''3''', 'fixed_window', 5, '1 minute');
COPY trig_bulk (author_id, body) FROM STDIN;
4	copied 5
3	copied 6
3	copied 7
\.
SELECT * FROM trig_peek('public.trig_bulk:author_id=''4''', 'fixed_window', 5, '1 minute');
SELECT author_id, count(*) FROM trig_bulk GROUP BY 1 ORDER BY 1;
-- A statement that writes no rows checks nothing.
INSERT INTO trig_bulk (author_id, body) SELECT 1, 'none' WHERE false;
-- The row trigger and the statement trigger name the same limiter for the
-- same table, columns, algorithm and window.
SELECT * FROM rl_peek_layered('public.trig_bulk:author_id=''1''',
							  ARRAY[('fixed_window', 5, '1 minute')]::rl_rule[]);

-- A statement trigger with a cost column sums it per key.
CREATE TABLE trig_bulk_cost (owner int, units int);
CREATE TRIGGER trig_bulk_cost_throttle AFTER INSERT ON trig_bulk_cost
	REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('owner', 'gcra', '10', '10 seconds', 'raise', 'units');
INSERT INTO trig_bulk_cost VALUES (1, 3), (1, 4), (2, 10), (3, 0);
SELECT * FROM trig_peek('public.trig_bulk_cost:owner=''1''', 'gcra', 10, '10 seconds');
SELECT * FROM trig_peek('public.trig_bulk_cost:owner=''3''', 'gcra', 10, '10 seconds');
-- 7 + 4 > 10: refused, with the wait for one unit (1000 ms).
SELECT * FROM trig_error($$INSERT INTO trig_bulk_cost VALUES (1, 2), (1, 2)$$);
SELECT * FROM trig_error($$INSERT INTO trig_bulk_cost VALUES (4, 6), (4, 6)$$);
SELECT * FROM trig_error($$INSERT INTO trig_bulk_cost VALUES (4, NULL)$$);
SELECT * FROM trig_error($$INSERT INTO trig_bulk_cost VALUES (4, 11)$$);
SELECT * FROM trig_peek('public.trig_bulk_cost:owner=''4''', 'gcra', 10, '10 seconds');

-- Many keys in one statement: 2000 authors, 2 rows each, checked 64
-- keys per script run (32 runs), so no script holds Redis for long.  In
-- cluster mode the keys go one script per hash slot, the statement
-- counted as one call in rl_status().
CREATE TABLE trig_wide (author_id int);
CREATE TRIGGER trig_wide_throttle AFTER INSERT ON trig_wide
	REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'sliding_counter', '3', '1 minute');
SELECT calls AS calls_before FROM rl_status() \gset
INSERT INTO trig_wide SELECT g % 2000 FROM generate_series(1, 4000) g;
SELECT calls - :calls_before = CASE current_setting('ratelimit.redis_mode')
		   WHEN 'cluster' THEN 1 ELSE 32 END AS checks_ok
FROM rl_status();
SELECT * FROM trig_peek('public.trig_wide:author_id=''1999''', 'sliding_counter', 3, '1 minute');
-- Then one more row for each, and a third for author 5: 5 is refused,
-- so no author is charged.
SELECT * FROM trig_error($$INSERT INTO trig_wide SELECT g % 2000 FROM generate_series(1, 2000) g
	UNION ALL SELECT 5 UNION ALL SELECT 5$$);
SELECT * FROM trig_peek('public.trig_wide:author_id=''1999''', 'sliding_counter', 3, '1 minute');
-- The same with a third row for author 1999, whose key comes in the last
-- chunk: it refuses; the chunks checked before it were charged, and the
-- statement's abort gives that back (refunds, the default), as it does a
-- row trigger's earlier rows; its own chunk's keys were never charged
-- (author 1998).  In cluster mode a statement of several scripts is
-- checked first and charged only if every script admits.  Either way
-- author 1 has 1 left.
SELECT * FROM trig_error($$INSERT INTO trig_wide SELECT g % 2000 FROM generate_series(1, 2000) g
	UNION ALL SELECT 1999 UNION ALL SELECT 1999$$);
SELECT allowed, remaining = 1 AS remaining_ok,
	   retry_after_ms, reset_after_ms
FROM trig_peek('public.trig_wide:author_id=''1''', 'sliding_counter', 3, '1 minute');
SELECT * FROM trig_peek('public.trig_wide:author_id=''1998''', 'sliding_counter', 3, '1 minute');
-- More than 10000 distinct keys in one statement.
SELECT * FROM trig_error($$INSERT INTO trig_wide SELECT g FROM generate_series(10000, 20000) g$$);

--
-- Statement trigger, two-trigger form: a row trigger counts, a statement
-- trigger checks
--
CREATE TABLE trig_pair (id int CHECK (id < 100), author_id int);
CREATE TRIGGER trig_pair_count BEFORE INSERT OR UPDATE ON trig_pair
	FOR EACH ROW EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '5', '1 minute');
CREATE TRIGGER trig_pair_check AFTER INSERT OR UPDATE ON trig_pair
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '5', '1 minute');
-- 3 rows for author 1, 2 for author 2, in one check.
SELECT calls AS calls_before FROM rl_status() \gset
INSERT INTO trig_pair SELECT g, 1 + g % 2 FROM generate_series(0, 4) g;
SELECT calls - :calls_before AS checks FROM rl_status();
SELECT * FROM trig_peek('public.trig_pair:author_id=''1''', 'fixed_window', 5, '1 minute');
SELECT * FROM trig_peek('public.trig_pair:author_id=''2''', 'fixed_window', 5, '1 minute');
-- Over the limit for author 1: refused, and author 2 is not charged.
SELECT * FROM trig_error($$INSERT INTO trig_pair VALUES (6, 1), (7, 2), (8, 1), (9, 1)$$);
SELECT * FROM trig_peek('public.trig_pair:author_id=''2''', 'fixed_window', 5, '1 minute');
-- More rows for one key than the limit: refused before Redis is asked
-- (here when the statement ends: integer keys are counted 256 rows at a time).
SELECT * FROM trig_error($$INSERT INTO trig_pair SELECT g, 9 FROM generate_series(1, 6) g$$);
-- In a longer statement the row trigger refuses within 256 rows.
SELECT * FROM trig_error($$INSERT INTO trig_pair
	SELECT g % 90, CASE WHEN g <= 6 THEN 9 ELSE 100 + g END FROM generate_series(1, 300) g$$);
SELECT * FROM trig_peek('public.trig_pair:author_id=''9''', 'fixed_window', 5, '1 minute');
-- UPDATE counts the updated rows: author 2's two rows move to author 3.
UPDATE trig_pair SET author_id = 3 WHERE author_id = 2;
SELECT * FROM trig_peek('public.trig_pair:author_id=''3''', 'fixed_window', 5, '1 minute');
-- A statement that fails after its rows were counted (id 200 breaks the
-- CHECK) charges nothing, in a transaction or a savepoint; the next
-- statement is charged for its own rows only.
SELECT * FROM trig_error($$INSERT INTO trig_pair VALUES (10, 4), (11, 4), (200, 4)$$);
BEGIN;
SAVEPOINT s;
INSERT INTO trig_pair VALUES (12, 4), (13, 4), (200, 4);
ROLLBACK TO SAVEPOINT s;
INSERT INTO trig_pair VALUES (14, 4);
COMMIT;
SELECT * FROM trig_peek('public.trig_pair:author_id=''4''', 'fixed_window', 5, '1 minute');
-- Nested statements on the same table: each row is charged once.
CREATE FUNCTION trig_pair_nested(a int) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO trig_pair VALUES (50, a);
	RETURN a;
END $$;
INSERT INTO trig_pair SELECT g, trig_pair_nested(5) FROM generate_series(20, 21) g;
SELECT * FROM trig_peek('public.trig_pair:author_id=''5''', 'fixed_window', 5, '1 minute');
-- A refusal caught in a PL/pgSQL block drops its counts with it.
DO $$
BEGIN
	INSERT INTO trig_pair SELECT g, 6 FROM generate_series(30, 32) g;
	BEGIN
		INSERT INTO trig_pair SELECT g, 6 FROM generate_series(33, 35) g;
	EXCEPTION WHEN SQLSTATE 'PT429' THEN
		RAISE NOTICE 'refused';
	END;
	INSERT INTO trig_pair VALUES (36, 6);
END $$;
SELECT * FROM trig_peek('public.trig_pair:author_id=''6''', 'fixed_window', 5, '1 minute');
-- COPY is counted the same way.
COPY trig_pair FROM STDIN;
40	7
41	7
\.
SELECT * FROM trig_peek('public.trig_pair:author_id=''7''', 'fixed_window', 5, '1 minute');
SELECT author_id, count(*) FROM trig_pair GROUP BY 1 ORDER BY 1;
-- The two halves must match: same arguments, and a statement trigger for
-- every event the row trigger counts.
DROP TRIGGER trig_pair_check ON trig_pair;
CREATE TRIGGER trig_pair_check AFTER INSERT ON trig_pair
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '6', '1 minute');
SELECT * FROM trig_error($$INSERT INTO trig_pair VALUES (60, 8)$$);
DROP TRIGGER trig_pair_check ON trig_pair;
CREATE TRIGGER trig_pair_check AFTER INSERT ON trig_pair
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '5', '1 minute');
INSERT INTO trig_pair VALUES (61, 8);
SELECT * FROM trig_error($$UPDATE trig_pair SET id = 62 WHERE id = 61$$);
DROP TRIGGER trig_pair_count ON trig_pair;
SELECT * FROM trig_error($$INSERT INTO trig_pair VALUES (63, 8)$$);
SELECT * FROM trig_peek('public.trig_pair:author_id=''8''', 'fixed_window', 5, '1 minute');
-- On a partitioned table the row half fires on the partitions, and the
-- parent's statement half checks what it counted there.
CREATE TABLE trig_pair_parts (author_id int) PARTITION BY RANGE (author_id);
CREATE TABLE trig_pair_part1 PARTITION OF trig_pair_parts FOR VALUES FROM (0) TO (100);
CREATE TRIGGER trig_pair_parts_count BEFORE INSERT ON trig_pair_parts
	FOR EACH ROW EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '5', '1 minute');
CREATE TRIGGER trig_pair_parts_check AFTER INSERT ON trig_pair_parts
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '5', '1 minute');
SELECT * FROM trig_error($$INSERT INTO trig_pair_parts VALUES (1)$$);
-- A statement that wrote more WAL than wal_writer_flush_after has it
-- flushed while Redis runs a check, instead of by its commit after: of
-- its 3 MB, less than wal_writer_flush_after (1 MB) is left unflushed.
-- (Which round trip flushes last depends on timing: the row half's, every
-- 256 rows, or the statement's.)
CREATE TABLE trig_pair_wal (author_id int, body text);
CREATE TRIGGER trig_pair_wal_count BEFORE INSERT ON trig_pair_wal
	FOR EACH ROW EXECUTE FUNCTION rl_throttle_statement('author_id', 'token_bucket', '100000', '1 minute', 'refund=off');
CREATE TRIGGER trig_pair_wal_check AFTER INSERT ON trig_pair_wal
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'token_bucket', '100000', '1 minute', 'refund=off');
BEGIN;
INSERT INTO trig_pair_wal SELECT g % 10, repeat('x', 100) FROM generate_series(1, 20000) g;
SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), pg_current_wal_flush_lsn()) < 1048576 AS flushed_early;
ROLLBACK;
-- Redis kept the charge (refund=off): 2000 rows per author, counted 256
-- rows at a time.
SELECT * FROM trig_peek('public.trig_pair_wal:author_id=''3''', 'token_bucket', 100000, '1 minute');

--
-- Partitioned tables and inheritance: every way of writing the rows is
-- throttled, or the trigger refuses the table
--
-- The two-trigger form on a partitioned table: the row half is on every
-- partition, and counts a partition's rows under the partitioned table.
CREATE TABLE trig_pp (author_id int, part int) PARTITION BY LIST (part);
CREATE TABLE trig_pp_a PARTITION OF trig_pp FOR VALUES IN (1);
CREATE TABLE trig_pp_b PARTITION OF trig_pp FOR VALUES IN (2);
CREATE TRIGGER trig_pp_count BEFORE INSERT OR UPDATE ON trig_pp
	FOR EACH ROW EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '3', '1 minute');
CREATE TRIGGER trig_pp_check AFTER INSERT OR UPDATE ON trig_pp
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '3', '1 minute');
-- Through the parent, into both partitions: one check.
SELECT calls AS calls_before FROM rl_status() \gset
INSERT INTO trig_pp VALUES (1, 1), (1, 2);
SELECT calls - :calls_before AS checks FROM rl_status();
-- Straight into a partition: checked when the statement ends, on the
-- same limiter.
INSERT INTO trig_pp_b VALUES (1, 2);
SELECT * FROM trig_peek('public.trig_pp:author_id=''1''', 'fixed_window', 3, '1 minute');
SELECT * FROM trig_error($$INSERT INTO trig_pp_b VALUES (1, 2)$$);
SELECT * FROM trig_error($$INSERT INTO trig_pp_b SELECT 1, 2 FROM generate_series(1, 5)$$);
SELECT count(*) FROM trig_pp WHERE author_id = 1;
-- COPY straight into a partition.
COPY trig_pp_a FROM STDIN;
2	1
2	1
\.
COPY trig_pp_a FROM STDIN;
2	1
2	1
\.
SELECT * FROM trig_peek('public.trig_pp:author_id=''2''', 'fixed_window', 3, '1 minute');
-- An UPDATE moving a row to another partition fires the row half as an
-- UPDATE in the old partition and as an INSERT in the new one: 2 rows.
INSERT INTO trig_pp VALUES (3, 2);
UPDATE trig_pp SET part = 1 WHERE author_id = 3;
SELECT * FROM trig_peek('public.trig_pp:author_id=''3''', 'fixed_window', 3, '1 minute');
SELECT * FROM trig_error($$UPDATE trig_pp SET part = 2 WHERE author_id = 3$$);
SELECT tableoid::regclass, count(*) FROM trig_pp GROUP BY 1 ORDER BY 1;
-- A pair created on a partition itself counts the rows a statement on
-- the parent routes there, and checks them when that statement ends.
CREATE TRIGGER trig_pp_b_count BEFORE INSERT ON trig_pp_b
	FOR EACH ROW EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '2', '1 minute');
CREATE TRIGGER trig_pp_b_check AFTER INSERT ON trig_pp_b
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '2', '1 minute');
INSERT INTO trig_pp VALUES (9, 2), (9, 2);
SELECT * FROM trig_error($$INSERT INTO trig_pp VALUES (9, 2)$$);
SELECT * FROM trig_peek('public.trig_pp_b:author_id=''9''', 'fixed_window', 2, '1 minute');
DROP TRIGGER trig_pp_b_count ON trig_pp_b;
DROP TRIGGER trig_pp_b_check ON trig_pp_b;
-- A partition attached later gets the row half too.
CREATE TABLE trig_pp_c (author_id int, part int);
ALTER TABLE trig_pp ATTACH PARTITION trig_pp_c FOR VALUES IN (3);
INSERT INTO trig_pp_c VALUES (4, 3), (4, 3), (4, 3);
SELECT * FROM trig_error($$INSERT INTO trig_pp_c VALUES (4, 3)$$);
-- A nested statement that catches its own denial does not take the
-- outer statement's counts with it: they are checked when that ends.
CREATE FUNCTION trig_pp_nested(a int) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
	BEGIN
		INSERT INTO trig_pp_b SELECT 5, 2 FROM generate_series(1, 4);
	EXCEPTION WHEN SQLSTATE 'PT429' THEN
		NULL;
	END;
	RETURN a;
END $$;
INSERT INTO trig_pp_a VALUES (6, 1), (6, 1), (6, 1);
SELECT * FROM trig_error($$INSERT INTO trig_pp_a SELECT trig_pp_nested(6), 1 FROM generate_series(1, 2)$$);
SELECT author_id, count(*) FROM trig_pp WHERE author_id IN (5, 6) GROUP BY 1;
-- Queries run for each row (a function's lookup) check nothing of the
-- statement they run in: one check for the whole statement.
CREATE FUNCTION trig_pp_lookup(a int) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM count(*) FROM trig_pp WHERE false;
	RETURN a;
END $$;
SELECT calls AS calls_before FROM rl_status() \gset
INSERT INTO trig_pp SELECT trig_pp_lookup(7 + g % 2), 1 + g % 3 FROM generate_series(1, 4) g;
SELECT calls - :calls_before AS checks FROM rl_status();

-- The transition-table form cannot see rows written straight into a
-- partition, or written through the parent of the table it is on:
-- refused when created.
CREATE TABLE trig_pt (author_id int, part int) PARTITION BY LIST (part);
CREATE TABLE trig_pt_a PARTITION OF trig_pt FOR VALUES IN (1);
CREATE TRIGGER trig_pt_bulk AFTER INSERT ON trig_pt REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '3', '1 minute');
CREATE TRIGGER trig_pt_a_bulk AFTER INSERT ON trig_pt_a REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '3', '1 minute');
SELECT count(*) FROM pg_trigger WHERE tgrelid IN ('trig_pt'::regclass, 'trig_pt_a'::regclass);

-- Inheritance: rows written straight into a child fire none of the
-- parent's triggers, so no trigger takes a table with children; a table
-- that gains one after its trigger was made refuses when it fires.
CREATE TABLE trig_inh (author_id int);
CREATE TRIGGER trig_inh_bulk AFTER INSERT ON trig_inh REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '3', '1 minute');
CREATE TABLE trig_inh_child () INHERITS (trig_inh);
SELECT * FROM trig_error($$INSERT INTO trig_inh VALUES (1)$$);
DROP TRIGGER trig_inh_bulk ON trig_inh;
CREATE TRIGGER trig_inh_row BEFORE INSERT ON trig_inh
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author_id', 'fixed_window', '3', '1 minute');
-- A pair on the child counts the child's rows an UPDATE of the parent
-- writes, and checks them when that statement ends.
CREATE TRIGGER trig_inh_child_count BEFORE INSERT OR UPDATE ON trig_inh_child
	FOR EACH ROW EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '3', '1 minute');
CREATE TRIGGER trig_inh_child_check AFTER INSERT OR UPDATE ON trig_inh_child
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '3', '1 minute');
INSERT INTO trig_inh_child VALUES (1), (1);
SELECT * FROM trig_error($$UPDATE trig_inh SET author_id = 1$$);
SELECT * FROM trig_peek('public.trig_inh_child:author_id=''1''', 'fixed_window', 3, '1 minute');
-- The transition-table form on the child is refused: it would miss them.
CREATE TRIGGER trig_inh_child_bulk AFTER INSERT ON trig_inh_child REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '3', '1 minute');

--
-- Key types: equal values share a limiter whatever the session settings
--
CREATE TABLE trig_keys (d date, ts timestamp, tz timestamptz, n numeric, c bpchar, t varchar);
CREATE TRIGGER trig_keys_throttle BEFORE INSERT ON trig_keys
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('d, ts, tz, n, c, t', 'fixed_window', '2', '1 minute');
SET TimeZone = 'UTC';
SET DateStyle = 'ISO, MDY';
INSERT INTO trig_keys VALUES ('2024-01-31', '2024-01-31 10:00', '2024-01-31 10:00+00', 1.5, 'x', 'Bob');
SET TimeZone = 'America/New_York';
SET DateStyle = 'SQL, DMY';
SET IntervalStyle = 'sql_standard';
SET extra_float_digits = 3;
INSERT INTO trig_keys VALUES ('31/01/2024', '31/01/2024 10:00', '31/01/2024 05:00', 1.50, 'x  ', 'Bob');
SELECT * FROM trig_error($$INSERT INTO trig_keys VALUES ('2024-01-31', '2024-01-31 10:00', '2024-01-31 12:00+02', 1.500, 'x', 'Bob')$$);
RESET TimeZone;
RESET DateStyle;
RESET IntervalStyle;
RESET extra_float_digits;
-- The key, in the fixed forms: ISO dates, timestamptz in UTC, numeric
-- without trailing zeros, char without trailing blanks.
SELECT * FROM trig_peek('public.trig_keys:d=''2024-01-31'',ts=''2024-01-31 10:00:00'',tz=''2024-01-31 10:00:00+00'',n=''1.5'',c=''x'',t=''Bob''',
						'fixed_window', 2, '1 minute');
-- Other values stay apart: 'Bob' is not 'BOB' under the default collation.
INSERT INTO trig_keys VALUES ('2024-01-31', '2024-01-31 10:00', '2024-01-31 10:00+00', 1.5, 'x', 'BOB');
-- Domains count as their base type; integers keep their 0.1.0 key.
CREATE DOMAIN trig_author AS bigint;
CREATE TYPE trig_mood AS ENUM ('calm', 'angry');
CREATE TABLE trig_keys2 (a trig_author, m trig_mood, u uuid, ip inet, ok boolean);
CREATE TRIGGER trig_keys2_throttle BEFORE INSERT ON trig_keys2
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('a, m, u, ip, ok', 'fixed_window', '2', '1 minute');
INSERT INTO trig_keys2 VALUES (7, 'calm', 'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11', '10.0.0.1/32', 'yes');
SELECT * FROM trig_peek('public.trig_keys2:a=''7'',m=''calm'',u=''a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'',ip=''10.0.0.1'',ok=''t''',
						'fixed_window', 2, '1 minute');
-- The statement trigger groups numeric 1.0 and 1.00 into one key.
CREATE TABLE trig_keys3 (n numeric);
CREATE TRIGGER trig_keys3_bulk AFTER INSERT ON trig_keys3 REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('n', 'fixed_window', '2', '1 minute');
SELECT * FROM trig_error($$INSERT INTO trig_keys3 VALUES (1.0), (1.00), (1)$$);
-- Types without such a text are refused when the trigger is created,
-- and when it fires (a column's type can change in between).
CREATE COLLATION trig_ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false);
CREATE DOMAIN trig_ci_text AS text COLLATE trig_ci;
CREATE TABLE trig_badkey (f float8, i interval, b bytea, m money, ci text COLLATE trig_ci, cd trig_ci_text);
CREATE FUNCTION trig_badkey_try(col text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
	RETURN QUERY SELECT * FROM trig_error(format($q$CREATE TRIGGER trig_badkey_t BEFORE INSERT ON trig_badkey
		FOR EACH ROW EXECUTE FUNCTION rl_throttle(%L, 'fixed_window', '2', '1 minute')$q$, col));
END $$;
SELECT * FROM trig_badkey_try('f');
SELECT * FROM trig_badkey_try('i');
SELECT * FROM trig_badkey_try('b');
SELECT * FROM trig_badkey_try('m');
SELECT * FROM trig_badkey_try('ci');
SELECT * FROM trig_badkey_try('cd');
SELECT count(*) FROM pg_trigger WHERE tgrelid = 'trig_badkey'::regclass;
-- A column whose type changes after the trigger was made: refused when
-- the trigger fires.
CREATE TABLE trig_keychange (k int);
CREATE TRIGGER trig_keychange_t BEFORE INSERT ON trig_keychange
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('k', 'fixed_window', '2', '1 minute');
ALTER TABLE trig_keychange ALTER COLUMN k TYPE float8;
SELECT * FROM trig_error($$INSERT INTO trig_keychange VALUES (1)$$);

--
-- Row-level security and constraints: an AFTER row trigger charges only
-- rows that passed them
--
CREATE ROLE regress_rl_trig_writer;
CREATE TABLE trig_rls (author_id int, body text CHECK (body <> ''));
ALTER TABLE trig_rls ENABLE ROW LEVEL SECURITY;
CREATE POLICY trig_rls_own ON trig_rls FOR INSERT TO regress_rl_trig_writer
	WITH CHECK (author_id = 1);
GRANT INSERT ON trig_rls TO regress_rl_trig_writer;
CREATE TRIGGER trig_rls_after AFTER INSERT ON trig_rls
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author_id', 'fixed_window', '3', '1 minute');
-- The writer may not call rl_throttle; the trigger fires for it anyway.
SELECT has_function_privilege('regress_rl_trig_writer', 'rl_throttle()', 'EXECUTE');
SET ROLE regress_rl_trig_writer;
INSERT INTO trig_rls VALUES (1, 'mine');
SELECT * FROM trig_error($$INSERT INTO trig_rls VALUES (2, 'not mine')$$);
SELECT * FROM trig_error($$INSERT INTO trig_rls VALUES (1, '')$$);
RESET ROLE;
SELECT * FROM trig_peek('public.trig_rls:author_id=''1''', 'fixed_window', 3, '1 minute');
SELECT * FROM trig_peek('public.trig_rls:author_id=''2''', 'fixed_window', 3, '1 minute');
-- Over the limit, the AFTER trigger fails the statement.
INSERT INTO trig_rls VALUES (1, 'b'), (1, 'c');
SELECT * FROM trig_error($$INSERT INTO trig_rls VALUES (1, 'd')$$);
SELECT count(*) FROM trig_rls;
-- The BEFORE form charges the row before the policy refuses it; the
-- failed statement gives the charge back.
DROP TRIGGER trig_rls_after ON trig_rls;
CREATE TRIGGER trig_rls_before BEFORE INSERT ON trig_rls
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author_id', 'fixed_window', '3', '1 minute');
SET ROLE regress_rl_trig_writer;
SELECT * FROM trig_error($$INSERT INTO trig_rls VALUES (2, 'not mine')$$);
RESET ROLE;
SELECT * FROM trig_peek('public.trig_rls:author_id=''2''', 'fixed_window', 3, '1 minute');
-- The transition-table form sees only rows written: a refused statement
-- charges nothing.
DROP TRIGGER trig_rls_before ON trig_rls;
CREATE TRIGGER trig_rls_bulk AFTER INSERT ON trig_rls REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '3', '1 minute');
SET ROLE regress_rl_trig_writer;
SELECT * FROM trig_error($$INSERT INTO trig_rls VALUES (1, 'e'), (3, 'not mine')$$);
RESET ROLE;
SELECT * FROM trig_peek('public.trig_rls:author_id=''3''', 'fixed_window', 3, '1 minute');
-- A denial's DETAIL shows the key's values, and a cost error the cost,
-- only to a role that may read them, by the rule of a unique violation's
-- DETAIL: SELECT on the table or on each column shown, and no row-level
-- security on the table.  A writer may update rows whose key it cannot
-- read.
CREATE TABLE trig_priv (id int, author_id int, cost int, body text);
CREATE TRIGGER trig_priv_t BEFORE INSERT OR UPDATE ON trig_priv
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author_id', 'fixed_window', '1', '1 minute',
											  'raise', 'cost');
GRANT INSERT, UPDATE ON trig_priv TO regress_rl_trig_writer;
GRANT SELECT (id) ON trig_priv TO regress_rl_trig_writer;
INSERT INTO trig_priv VALUES (1, 42, 1, 'a');
SET ROLE regress_rl_trig_writer;
SELECT * FROM trig_error($$UPDATE trig_priv SET body = 'b' WHERE id = 1$$);
SELECT * FROM trig_error($$INSERT INTO trig_priv VALUES (2, 43, 5, 'c')$$);
RESET ROLE;
GRANT SELECT (author_id) ON trig_priv TO regress_rl_trig_writer;
SET ROLE regress_rl_trig_writer;
SELECT * FROM trig_error($$UPDATE trig_priv SET body = 'b' WHERE id = 1$$);
SELECT * FROM trig_error($$INSERT INTO trig_priv VALUES (2, 43, 5, 'c')$$);
RESET ROLE;
GRANT SELECT (cost) ON trig_priv TO regress_rl_trig_writer;
SET ROLE regress_rl_trig_writer;
SELECT * FROM trig_error($$INSERT INTO trig_priv VALUES (2, 43, 5, 'c')$$);
RESET ROLE;
ALTER TABLE trig_priv ENABLE ROW LEVEL SECURITY;
CREATE POLICY trig_priv_all ON trig_priv USING (true) WITH CHECK (true);
GRANT SELECT ON trig_priv TO regress_rl_trig_writer;
SET ROLE regress_rl_trig_writer;
SELECT * FROM trig_error($$UPDATE trig_priv SET body = 'b' WHERE id = 1$$);
RESET ROLE;
-- The owner, with SELECT and exempt from its own policies, sees all.
SELECT * FROM trig_error($$UPDATE trig_priv SET body = 'b' WHERE id = 1$$);
DROP TABLE trig_priv;

-- An AFTER trigger cannot skip a row it comes too late for.
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s', 'skip'$$, 'AFTER INSERT');

--
-- Redis unavailable: the failure policy decides
--
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
INSERT INTO trig_comments (author_id, body) VALUES (1, 'fail open');
SET ratelimit.failure_mode = closed;
SELECT regexp_replace(t, '[0-9]+ ms', 'N ms') FROM trig_error($$INSERT INTO trig_comments (author_id, body) VALUES (1, 'fail closed')$$) t;
SELECT regexp_replace(t, '[0-9]+ ms', 'N ms') FROM trig_error($$INSERT INTO trig_bulk (author_id, body) VALUES (5, 'fail closed')$$) t;
INSERT INTO trig_likes VALUES (7, 9);
SET ratelimit.failure_mode = error;
SELECT * FROM trig_error($$INSERT INTO trig_comments (author_id, body) VALUES (1, 'fail error')$$) t
	WHERE t NOT LIKE 'detail:%';
RESET ratelimit.failure_mode;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;
SELECT body FROM trig_comments WHERE body LIKE 'fail%';
SELECT * FROM trig_likes WHERE user_id = 9;

--
-- Generated key columns: a BEFORE trigger sees them as NULL (every row
-- would share the limiter "email_key=NULL"), so only AFTER forms may key
-- on them; refused at CREATE TRIGGER (0A000).
--
CREATE TABLE trig_gen (email text,
	email_key text GENERATED ALWAYS AS (lower(email)) STORED);
SELECT * FROM trig_error($$CREATE TRIGGER t BEFORE INSERT ON trig_gen FOR EACH ROW
	EXECUTE FUNCTION rl_throttle('email_key', 'fixed_window', '1', '1 hour')$$);
SELECT * FROM trig_error($$CREATE TRIGGER t BEFORE INSERT ON trig_gen FOR EACH ROW
	EXECUTE FUNCTION rl_throttle_statement('email_key', 'fixed_window', '1', '1 hour')$$);
CREATE TRIGGER t AFTER INSERT ON trig_gen FOR EACH ROW
	EXECUTE FUNCTION rl_throttle('email_key', 'fixed_window', '1', '1 hour');
-- 'Bob' and 'BOB' share the generated key, so the second is denied.
SELECT * FROM trig_error($$INSERT INTO trig_gen (email) VALUES ('Bob@example.com')$$);
SELECT * FROM trig_error($$INSERT INTO trig_gen (email) VALUES ('BOB@example.com')$$);
SELECT * FROM trig_error($$INSERT INTO trig_gen (email) VALUES ('alice@example.com')$$);
SELECT email FROM trig_gen ORDER BY email;
DROP TABLE trig_gen;

DROP TABLE trig_comments, trig_posts, trig_events, trig_likes, trig_multi, trig_uploads, trig_bad,
	trig_bulk, trig_bulk_cost, trig_wide, trig_pair, trig_pair_parts, trig_pair_wal,
	trig_pp, trig_pt, trig_inh, trig_inh_child, trig_keys, trig_keys2, trig_keys3, trig_badkey, trig_keychange, trig_rls;
DROP DOMAIN trig_author, trig_ci_text;
DROP TYPE trig_mood;
DROP COLLATION trig_ci;
DROP ROLE regress_rl_trig_writer;
DROP FUNCTION trig_pair_nested(int);
DROP FUNCTION trig_pp_nested(int);
DROP FUNCTION trig_pp_lookup(int);
DROP FUNCTION trig_badkey_try(text);
DROP FUNCTION trig_try(text, text, text, text, text, text);
DROP FUNCTION trig_error(text);
DROP FUNCTION trig_peek(text, text, bigint, interval);
