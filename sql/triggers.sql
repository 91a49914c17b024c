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
-- rows is stored, but the rows checked before it stay counted.
SELECT * FROM trig_error($$INSERT INTO trig_comments (author_id, body)
	SELECT 3, 'bulk ' || g FROM generate_series(1, 5) g$$);
SELECT count(*) FROM trig_comments WHERE author_id = 3;
SELECT * FROM trig_peek('public.trig_comments:author_id=''3''', 'sliding_log', 3, '1 minute');

-- A rollback does not give back what was consumed.
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
-- Bad trigger definitions are reported when the trigger first fires
--
CREATE TABLE trig_bad (a int, b text);
CREATE FUNCTION trig_try(args text, timing text DEFAULT 'BEFORE INSERT',
						 level text DEFAULT 'ROW', fn text DEFAULT 'rl_throttle',
						 referencing text DEFAULT '',
						 dml text DEFAULT $q$INSERT INTO trig_bad VALUES (1, 'x')$q$)
RETURNS SETOF text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE format('CREATE TRIGGER trig_bad_t %s ON trig_bad %s FOR EACH %s EXECUTE FUNCTION %s(%s)',
				   timing, referencing, level, fn, args);
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
SELECT * FROM trig_try($$'a', 'gcra', '1', '1 s'$$, 'AFTER INSERT');
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
-- keys per script run (32 runs), so no script holds Redis for long.
CREATE TABLE trig_wide (author_id int);
CREATE TRIGGER trig_wide_throttle AFTER INSERT ON trig_wide
	REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'sliding_counter', '3', '1 minute');
SELECT calls AS calls_before FROM rl_status() \gset
INSERT INTO trig_wide SELECT g % 2000 FROM generate_series(1, 4000) g;
SELECT calls - :calls_before AS checks FROM rl_status();
SELECT * FROM trig_peek('public.trig_wide:author_id=''1999''', 'sliding_counter', 3, '1 minute');
-- Then one more row for each, and a third for author 5: 5 is refused,
-- so no author is charged.
SELECT * FROM trig_error($$INSERT INTO trig_wide SELECT g % 2000 FROM generate_series(1, 2000) g
	UNION ALL SELECT 5 UNION ALL SELECT 5$$);
SELECT * FROM trig_peek('public.trig_wide:author_id=''1999''', 'sliding_counter', 3, '1 minute');
-- The same with a third row for author 1999, whose key comes in the last
-- chunk: it refuses, and the chunks checked before it stay charged
-- (author 1), as a row trigger's earlier rows do; its own chunk's keys
-- are not (author 1998).
SELECT * FROM trig_error($$INSERT INTO trig_wide SELECT g % 2000 FROM generate_series(1, 2000) g
	UNION ALL SELECT 1999 UNION ALL SELECT 1999$$);
SELECT * FROM trig_peek('public.trig_wide:author_id=''1''', 'sliding_counter', 3, '1 minute');
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
-- On a partitioned table the row trigger fires on the partitions, where
-- no statement trigger sees the rows: refused, with the form that works.
CREATE TABLE trig_pair_parts (author_id int) PARTITION BY RANGE (author_id);
CREATE TABLE trig_pair_part1 PARTITION OF trig_pair_parts FOR VALUES FROM (0) TO (100);
CREATE TRIGGER trig_pair_parts_count BEFORE INSERT ON trig_pair_parts
	FOR EACH ROW EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '5', '1 minute');
CREATE TRIGGER trig_pair_parts_check AFTER INSERT ON trig_pair_parts
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '5', '1 minute');
SELECT * FROM trig_error($$INSERT INTO trig_pair_parts VALUES (1)$$);
-- A statement that wrote more WAL than wal_writer_flush_after has it
-- flushed while Redis runs the check, instead of by its commit after.
CREATE TABLE trig_pair_wal (author_id int, body text);
CREATE TRIGGER trig_pair_wal_count BEFORE INSERT ON trig_pair_wal
	FOR EACH ROW EXECUTE FUNCTION rl_throttle_statement('author_id', 'token_bucket', '100000', '1 minute');
CREATE TRIGGER trig_pair_wal_check AFTER INSERT ON trig_pair_wal
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'token_bucket', '100000', '1 minute');
BEGIN;
INSERT INTO trig_pair_wal SELECT g % 10, repeat('x', 100) FROM generate_series(1, 20000) g;
SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), pg_current_wal_flush_lsn()) < 8192 AS flushed_early;
ROLLBACK;
-- Redis kept the charge: 2000 rows per author, counted 256 rows at a time.
SELECT * FROM trig_peek('public.trig_pair_wal:author_id=''3''', 'token_bucket', 100000, '1 minute');

--
-- Redis unavailable: the failure policy decides
--
SET ratelimit.redis_port = 1;
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
SELECT body FROM trig_comments WHERE body LIKE 'fail%';
SELECT * FROM trig_likes WHERE user_id = 9;

DROP TABLE trig_comments, trig_posts, trig_events, trig_likes, trig_multi, trig_uploads, trig_bad,
	trig_bulk, trig_bulk_cost, trig_wide, trig_pair, trig_pair_parts, trig_pair_wal;
DROP FUNCTION trig_pair_nested(int);
DROP FUNCTION trig_try(text, text, text, text, text, text);
DROP FUNCTION trig_error(text);
DROP FUNCTION trig_peek(text, text, bigint, interval);
