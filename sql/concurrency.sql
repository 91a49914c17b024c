--
-- concurrency: the seventh algorithm (issue 25; doc/refunds.md, "A
-- concurrency limit"): at most limit units held at once, each admitted
-- call holding its cost until its transaction ends (commit or abort) or
-- its lease (the window) runs out.  The clock is pinned.  Then: by
-- policy, in a layered check beside a rate, in a batch, with rl_acquire,
-- under a trigger, the bounds, and the same on the local engine.
--
LOAD 'ratelimit';
SET ratelimit.test_clock_ms = 1800000000000;

-- Three holders in one transaction; the fourth is refused until one of
-- them ends; its wait is the first lease's end (an upper bound: a release
-- comes first).  The commit releases all three.
BEGIN;
SELECT * FROM rl_allow('export:1', 'concurrency', 3, '5 minutes');
SELECT * FROM rl_allow('export:1', 'concurrency', 3, '5 minutes');
SELECT * FROM rl_allow('export:1', 'concurrency', 3, '5 minutes');
SELECT * FROM rl_allow('export:1', 'concurrency', 3, '5 minutes');
SELECT * FROM rl_peek('export:1', 'concurrency', 3, '5 minutes');
COMMIT;
SELECT * FROM rl_peek('export:1', 'concurrency', 3, '5 minutes');

-- A rollback releases too; a savepoint rolled back releases its own.
BEGIN;
SELECT allowed FROM rl_allow('export:1', 'concurrency', 3, '5 minutes', 2);
SAVEPOINT a;
SELECT allowed FROM rl_allow('export:1', 'concurrency', 3, '5 minutes');
SELECT remaining FROM rl_peek('export:1', 'concurrency', 3, '5 minutes');
ROLLBACK TO SAVEPOINT a;
SELECT remaining FROM rl_peek('export:1', 'concurrency', 3, '5 minutes');
ROLLBACK;
SELECT remaining FROM rl_peek('export:1', 'concurrency', 3, '5 minutes');

-- A holder whose release never comes holds its slot until its lease ends
-- (here the clock moves past it inside the transaction).
BEGIN;
SELECT allowed FROM rl_allow('export:2', 'concurrency', 1, '10 seconds');
SELECT allowed, retry_after_ms FROM rl_allow('export:2', 'concurrency', 1, '10 seconds');
SET LOCAL ratelimit.test_clock_ms = 1800000009999;
SELECT allowed FROM rl_allow('export:2', 'concurrency', 1, '10 seconds');
SET LOCAL ratelimit.test_clock_ms = 1800000010000;
SELECT allowed, remaining FROM rl_allow('export:2', 'concurrency', 1, '10 seconds');
COMMIT;
SELECT remaining FROM rl_peek('export:2', 'concurrency', 1, '10 seconds');

-- The deny cache does not keep a concurrency denial (a release ends it).
BEGIN;
SELECT allowed FROM rl_allow('export:3', 'concurrency', 1, '1 minute');
SELECT count(*) FILTER (WHERE NOT allowed) FROM generate_series(1, 3),
	rl_allow('export:3', 'concurrency', 1, '1 minute');
ROLLBACK;
SELECT cached = 0 AS none_cached FROM rl_status();

-- By policy, layered beside a rate, in a batch.
INSERT INTO rl_policies (name, algo, "limit", "window") VALUES
	('cc.exports', 'concurrency', 2, '5 minutes'),
	('cc.rate', 'fixed_window', 100, '1 hour');
BEGIN;
SELECT allowed, remaining FROM rl_allow('user:7', 'cc.exports');
SELECT allowed, remaining FROM rl_allow_layered('user:7', ARRAY['cc.exports', 'cc.rate']);
SELECT allowed, remaining FROM rl_allow_layered('user:7', ARRAY['cc.exports', 'cc.rate']);
SELECT key, allowed, remaining FROM rl_allow_many(ARRAY['user:7', 'user:8'], 'cc.exports');
COMMIT;
SELECT k, p, remaining FROM (VALUES ('user:7', 'cc.exports'), ('user:8', 'cc.exports'),
	('user:7', 'cc.rate')) v(k, p), rl_peek(k, p) ORDER BY k, p;

-- rl_acquire waits for a slot (the pinned clock stands for the time
-- slept, in steps of 20 ms): not within max_wait, then once the lease
-- has ended.
BEGIN;
SELECT allowed FROM rl_allow('export:4', 'concurrency', 1, '1 second');
SELECT allowed FROM rl_acquire('export:4', 'concurrency', 1, '1 second', max_wait => '500 ms');
SELECT allowed FROM rl_acquire('export:4', 'concurrency', 1, '1 second', max_wait => '2 seconds');
COMMIT;

-- A row trigger: each row holds a slot until the transaction ends.
CREATE TABLE cc_jobs (owner int);
CREATE TRIGGER cc_jobs_limit BEFORE INSERT ON cc_jobs FOR EACH ROW
	EXECUTE FUNCTION rl_throttle('owner', 'concurrency', '2', '1 minute');
BEGIN;
INSERT INTO cc_jobs VALUES (1), (1);
SELECT remaining FROM rl_peek('public.cc_jobs:owner=''1''', 'concurrency', 2, '1 minute');
COMMIT;
SELECT remaining FROM rl_peek('public.cc_jobs:owner=''1''', 'concurrency', 2, '1 minute');
INSERT INTO cc_jobs VALUES (1), (1), (1);

-- Bounds: as the sliding log's; no burst.
SELECT rl_allow('export:9', 'concurrency', 100001, '1 minute');
SELECT rl_allow('export:9', 'concurrency', 3, '1 minute', burst => 5);

-- The local engine.
SET ratelimit.engine = local;
BEGIN;
SELECT allowed, remaining FROM rl_allow('export:1', 'concurrency', 3, '5 minutes', 3);
SELECT allowed, remaining, retry_after_ms FROM rl_allow('export:1', 'concurrency', 3, '5 minutes');
SAVEPOINT a;
SET LOCAL ratelimit.test_clock_ms = 1800000300000;
SELECT allowed, remaining FROM rl_allow('export:1', 'concurrency', 3, '5 minutes');
ROLLBACK TO SAVEPOINT a;
COMMIT;
SELECT remaining FROM rl_peek('export:1', 'concurrency', 3, '5 minutes');
RESET ratelimit.engine;

DROP TABLE cc_jobs;


-- Held for the session: rl_hold's slot outlives its transaction, until
-- rl_release (once) or the backend's exit.
INSERT INTO rl_policies (name, algo, "limit", "window") VALUES
	('cc.session', 'concurrency', 2, '1 hour'),
	('cc.notcc', 'fixed_window', 2, '1 hour');
SELECT allowed, holder IS NOT NULL AS held, remaining FROM rl_hold('batch:1', 'cc.session') \gset h1_
SELECT :'h1_allowed', :'h1_held', :'h1_remaining';
SELECT allowed, holder IS NOT NULL AS held, remaining FROM rl_hold('batch:1', 2, '1 hour');
SELECT holder AS h2 FROM rl_hold('batch:1', 'cc.session') \gset
SELECT allowed, holder IS NULL AS none, remaining FROM rl_hold('batch:1', 'cc.session');
SELECT remaining FROM rl_peek('batch:1', 'cc.session');
SELECT rl_release(:h2), rl_release(:h2), rl_release(-1);
SELECT remaining FROM rl_peek('batch:1', 'cc.session');
-- Only a concurrency limit can be held; NULLs are refused.
SELECT * FROM rl_hold('batch:1', 'cc.notcc');
SELECT * FROM rl_hold('batch:1', NULL);
SELECT rl_release(NULL);

-- The PostgREST guard: one request, one transaction, one slot (the JWT's
-- sub names the key); a second request of that caller while the first
-- runs is refused with PostgREST's 429; the commit frees the slot.
INSERT INTO rl_policies (name, algo, "limit", "window")
VALUES ('cc.guard', 'concurrency', 1, '1 minute');
BEGIN;
SELECT set_config('request.jwt.claims', '{"sub":"u9"}', true) IS NOT NULL AS claims;
SELECT rl_postgrest_guard('cc.guard');
SELECT remaining FROM rl_peek('sub:u9', 'cc.guard');
SAVEPOINT second;
SELECT rl_postgrest_guard('cc.guard');
ROLLBACK TO SAVEPOINT second;
COMMIT;
SELECT remaining FROM rl_peek('sub:u9', 'cc.guard');
DELETE FROM rl_policies WHERE name LIKE 'cc.%';
