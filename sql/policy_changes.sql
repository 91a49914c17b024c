--
-- policy_changes: what a named policy's state becomes when its limit,
-- window or burst changes (issue 24; doc/algorithms.md, "When a policy
-- changes").  For each of the six algorithms one script of calls by name,
-- with UPDATEs of the policy (each of limit, window and burst raised and
-- lowered) in between and the clock pinned, is played against an exact
-- model of the rules written here in integers (pc_model), on both
-- engines; every step is printed with its answer, and a mismatch with the
-- model's.  Then the same script through the parameter forms, which carry
-- nothing: each parameter set is a limiter of its own, as in 0.4.0.
--
LOAD 'ratelimit';
SET ratelimit.test_clock_ms = 1800000000000;

-- Exact division of whole numbers (b > 0), rounded down and up.
CREATE FUNCTION pc_fdiv(a numeric, b numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN a >= 0 THEN div(a, b) ELSE -div(-a + b - 1, b) END
$$;
CREATE FUNCTION pc_cdiv(a numeric, b numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$ SELECT -pc_fdiv(-a, b) $$;
-- A time of num/den microseconds in whole ms, rounded up, never negative.
CREATE FUNCTION pc_ms(num numeric, den numeric DEFAULT 1) RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$
	SELECT CASE WHEN num <= 0 THEN 0 ELSE pc_cdiv(num, den * 1000) END
$$;

-- The model's state: per key, four numbers (as each algorithm says
-- below) and the parameters they were written under; the sliding log's
-- calls (time, cost) in order.
CREATE TABLE pc_state (k text PRIMARY KEY, a numeric, b numeric,
	c numeric, d numeric, l numeric, w numeric);
CREATE TABLE pc_log (k text, seq serial, t numeric, cost numeric);
CREATE TABLE pc_mismatch (n int);

-- The answer the rules give at now (us) for a call of cost under
-- (lim, win us, cap): {allowed 0/1, remaining, retry_after_ms,
-- reset_after_ms}, with the state changed as the call changes it.
CREATE FUNCTION pc_model(algo text, k text, now numeric, lim numeric,
	win numeric, cap numeric, cost numeric) RETURNS numeric[]
LANGUAGE plpgsql AS $$
DECLARE
	s pc_state;
	g numeric := gcd(lim, win);
	unit numeric := win / gcd(lim, win);	-- one unit, in 1/unit
	rate numeric := lim / gcd(lim, win);	-- 1/unit per us
	capu numeric := cap * unit;
	start numeric := now - mod(now, win);
	used numeric := 0;
	cur numeric := 0;
	prev numeric := 0;
	cc numeric;
	pc numeric;
	lft numeric;
	rem numeric;
	debt numeric := 0;
	ends numeric;
	e numeric;
	k_ numeric;
	newest numeric;
	wait_t numeric;
	r numeric[];
BEGIN
	SELECT * INTO s FROM pc_state WHERE pc_state.k = pc_model.k;
	IF algo = 'fixed_window' THEN
		-- (a, b) = window start and units used; w: its window.  They count
		-- in the current grid's window while their own window holds.
		IF s.k IS NOT NULL AND now < s.a + s.w THEN
			used := s.b;
			UPDATE pc_state SET a = start, w = win WHERE pc_state.k = pc_model.k;
		ELSE
			DELETE FROM pc_state WHERE pc_state.k = pc_model.k;
		END IF;
		used := least(lim, used);
		ends := start + win;
		IF used + cost > lim THEN
			RETURN ARRAY[0, lim - used, greatest(1, pc_ms(ends - now)), pc_ms(ends - now)];
		END IF;
		IF cost > 0 THEN
			DELETE FROM pc_state WHERE pc_state.k = pc_model.k;
			INSERT INTO pc_state VALUES (k, start, used + cost, 0, 0, lim, win);
		END IF;
		RETURN ARRAY[1, lim - used - cost, 0,
			CASE WHEN used + cost > 0 THEN pc_ms(ends - now) ELSE 0 END];
	ELSIF algo = 'sliding_counter' THEN
		-- (a, b, c) = window start, its count, the previous one's; w: the
		-- window.  Each count still counting goes at its latest moment into
		-- the current grid's window (current or previous) holding it.
		IF s.k IS NOT NULL THEN
			IF now < s.a + 2 * s.w THEN
				e := least(now, s.a + s.w - 1);
				IF e >= start THEN cur := cur + s.b;
				ELSIF e >= start - win THEN prev := prev + s.b; END IF;
			END IF;
			IF now < s.a + s.w THEN
				e := s.a - 1;
				IF e >= start THEN cur := cur + s.c;
				ELSIF e >= start - win THEN prev := prev + s.c; END IF;
			END IF;
			UPDATE pc_state SET a = start, b = cur, c = prev, w = win
			WHERE pc_state.k = pc_model.k;
		END IF;
		cc := least(lim, cur);
		pc := least(lim, prev);
		lft := win - (now - start);
		rem := lim - cc - pc_cdiv(pc * lft, win);
		IF pc * lft + (cc + cost) * win > lim * win THEN
			IF cc + cost <= lim THEN
				r := ARRAY[lft * pc - (lim - cc - cost) * win, pc];
			ELSE
				r := ARRAY[(lft + win) * cc - (lim - cost) * win, cc];
			END IF;
			RETURN ARRAY[0, greatest(0, rem), greatest(1, pc_ms(r[1], r[2])),
				pc_ms(CASE WHEN cc > 0 THEN lft + win ELSE lft END)];
		END IF;
		IF cost > 0 THEN
			DELETE FROM pc_state WHERE pc_state.k = pc_model.k;
			INSERT INTO pc_state VALUES (k, start, cc + cost, prev, 0, lim, win);
		END IF;
		RETURN ARRAY[1, greatest(0, rem - cost), 0,
			CASE WHEN cc + cost > 0 THEN pc_ms(lft + win)
				 WHEN pc > 0 THEN pc_ms(lft) ELSE 0 END];
	ELSIF algo = 'sliding_log' THEN
		-- The calls in (now - window, now] count; an admitted call drops
		-- those before (all of them when none is left).
		SELECT coalesce(sum(pc_log.cost), 0), max(t) INTO used, newest
		FROM pc_log WHERE pc_log.k = pc_model.k AND t > now - win;
		IF cost > 0 AND used + cost > lim THEN
			k_ := used + cost - lim;
			SELECT min(t) INTO wait_t FROM (
				SELECT t, sum(pc_log.cost) OVER (ORDER BY seq) AS acc
				FROM pc_log WHERE pc_log.k = pc_model.k AND t > now - win) x
			WHERE acc >= k_;
			RETURN ARRAY[0, greatest(0, lim - used), greatest(1, pc_ms(wait_t + win - now)),
				pc_ms(newest + win - now)];
		END IF;
		IF cost = 0 THEN
			RETURN ARRAY[1, greatest(0, lim - used), 0,
				CASE WHEN used > 0 THEN pc_ms(newest + win - now) ELSE 0 END];
		END IF;
		DELETE FROM pc_log WHERE pc_log.k = pc_model.k AND t <= now - win;
		INSERT INTO pc_log (k, t, cost) VALUES (k, now, cost);
		RETURN ARRAY[1, lim - used - cost, 0, pc_ms(win)];
	END IF;

	-- The buckets and GCRA: a = what is used at b (the debt of
	-- token_bucket, the level of leaky_bucket, GCRA's units taken), in
	-- units of 1/unit of the parameters (l, w) it was written under.
	-- None once their own rate has paid it off; else in this scale,
	-- rounded up, at most the capacity, paid off from b at this rate.
	IF s.k IS NOT NULL AND (now - s.b) * (s.l / gcd(s.l, s.w)) < s.a THEN
		debt := least(capu, pc_cdiv(s.a * unit, s.w / gcd(s.l, s.w)));
		UPDATE pc_state SET a = debt, l = lim, w = win
		WHERE pc_state.k = pc_model.k;
		debt := greatest(0, debt - (now - s.b) * rate);
	ELSE
		DELETE FROM pc_state WHERE pc_state.k = pc_model.k;
	END IF;
	IF algo = 'token_bucket' THEN
		IF capu - debt < cost * unit THEN
			RETURN ARRAY[0, pc_fdiv(capu - debt, unit),
				greatest(1, pc_ms(cost * unit - (capu - debt), rate)),
				pc_ms(debt, rate)];
		END IF;
		debt := debt + cost * unit;
		r := ARRAY[1, pc_fdiv(capu - debt, unit), 0, pc_ms(debt, rate)];
	ELSIF algo = 'leaky_bucket' THEN
		IF debt + cost * unit > capu THEN
			RETURN ARRAY[0, pc_fdiv(greatest(0, capu - debt), unit),
				greatest(1, pc_ms(debt + cost * unit - capu, rate)),
				pc_ms(debt, rate)];
		END IF;
		debt := debt + cost * unit;
		r := ARRAY[1, pc_fdiv(capu - debt, unit), 0, pc_ms(debt, rate)];
	ELSE
		IF debt + cost * unit > capu THEN
			RETURN ARRAY[0, pc_fdiv(capu - debt, unit),
				greatest(1, pc_ms(debt + cost * unit - capu, rate)),
				pc_ms(debt, rate)];
		END IF;
		debt := debt + cost * unit;
		r := ARRAY[1, pc_fdiv(capu - debt, unit), 0, pc_ms(debt, rate)];
	END IF;
	IF cost > 0 THEN
		DELETE FROM pc_state WHERE pc_state.k = pc_model.k;
		INSERT INTO pc_state VALUES (k, debt, now, 0, 0, lim, win);
	END IF;
	RETURN r;
END
$$;

-- The script every algorithm plays: after adv ms, the policy's row is
-- changed by change (burst changes only for the algorithms with a
-- burst), then a call of cost (0: rl_peek).
CREATE TABLE pc_script (n int, adv numeric, change text, cost int);
INSERT INTO pc_script VALUES
	(1, 0, NULL, 2),
	(2, 0, NULL, 2),
	(3, 0, NULL, 2),
	(4, 1000, '"limit" = 8', 0),
	(5, 0, NULL, 3),
	(6, 0, NULL, 2),
	(7, 500, '"limit" = 3', 1),
	(8, 0, NULL, 0),
	(9, 2000, '"window" = ''20 s''', 1),
	(10, 3000, NULL, 1),
	(11, 4000, '"limit" = 10', 2),
	(12, 1500, '"window" = ''4 s''', 1),
	(13, 1000, NULL, 2),
	(14, 3000, 'burst = 8', 3),
	(15, 0, NULL, 3),
	(16, 700, 'burst = 2', 1),
	(17, 0, NULL, 1),
	(18, 2500, '"limit" = 7, "window" = ''999983 us''', 1),
	(19, 333, NULL, 2),
	(20, 12000, '"limit" = 2', 1),
	(21, 100, NULL, 1),
	(22, 100, NULL, 1),
	(23, 30000, '"limit" = 4, "window" = ''1 min''', 2),
	(24, 1000, NULL, 2),
	(25, 1000, NULL, 1),
	(26, 61000, NULL, 1),
	(27, 10, 'burst = NULL', 1),
	(28, 0, '"window" = ''1 s''', 2),
	(29, 0, '"window" = ''2 min''', 2),
	(30, 250, '"limit" = 1', 0);

-- Plays the script for algo on key k: by name (policy pol), or through
-- the parameter forms with the policy's parameters of each step (pol
-- NULL).  One line per step; mismatches are counted in pc_mismatch.
CREATE FUNCTION pc_play(algo text, k text, pol text) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
	st record;
	p rl_policies;
	clock numeric := 1800000000000;
	cap numeric;
	win numeric;
	got rl_result;
	exp numeric[];
	mk text;
	seen text[] := '{}';
BEGIN
	DELETE FROM pc_state WHERE pc_state.k LIKE pc_play.k || '%';
	DELETE FROM pc_log WHERE pc_log.k LIKE pc_play.k || '%';
	DELETE FROM rl_policies WHERE name = 'pc.policy';
	INSERT INTO rl_policies (name, algo, "limit", "window")
	VALUES ('pc.policy', algo, 5, '10 s');
	PERFORM set_config('ratelimit.test_clock_ms', clock::text, false);
	PERFORM rl_reset(k, 'pc.policy');
	FOR st IN SELECT * FROM pc_script ORDER BY n LOOP
		clock := clock + st.adv;
		PERFORM set_config('ratelimit.test_clock_ms', clock::text, false);
		IF st.change IS NOT NULL AND
			(st.change NOT LIKE 'burst%' OR algo IN ('token_bucket', 'leaky_bucket', 'gcra')) THEN
			EXECUTE format('UPDATE rl_policies SET %s WHERE name = %L', st.change, 'pc.policy');
		END IF;
		SELECT * INTO p FROM rl_policies WHERE name = 'pc.policy';
		cap := coalesce(p.burst, p."limit");
		win := round(extract(epoch FROM p."window") * 1000000);
		IF pol IS NOT NULL THEN
			mk := k;
			IF st.cost = 0 THEN
				got := rl_peek(k, pol);
			ELSE
				got := rl_allow(k, pol, st.cost);
			END IF;
		ELSE
			-- The parameter forms: a limiter per parameter set.
			mk := format('%s/%s/%s/%s', k, p."limit", win, p.burst);
			IF NOT mk = ANY (seen) THEN
				PERFORM rl_reset(k, algo, p."limit", p."window", p.burst);
				seen := seen || mk;
			END IF;
			IF st.cost = 0 THEN
				got := rl_peek(k, algo, p."limit", p."window", p.burst);
			ELSE
				got := rl_allow(k, algo, p."limit", p."window", st.cost, p.burst);
			END IF;
		END IF;
		exp := pc_model(algo, mk, clock * 1000, p."limit", win, cap, st.cost);
		-- A peek is admitted, whatever the state (a lowered limit's too).
		IF st.cost = 0 AND exp[1] = 0 THEN
			exp := ARRAY[1, exp[2], 0, exp[4]];
		END IF;
		IF ARRAY[got.allowed::int, got.remaining, got.retry_after_ms, got.reset_after_ms]::numeric[]
			IS DISTINCT FROM exp THEN
			INSERT INTO pc_mismatch VALUES (st.n);
		END IF;
		RETURN NEXT format('%2s +%5s %-40s %s/%s/%s c%s: %s%s', st.n, st.adv,
			coalesce(st.change, ''), p."limit", p."window", coalesce(p.burst::text, '-'),
			st.cost, got,
			CASE WHEN ARRAY[got.allowed::int, got.remaining, got.retry_after_ms,
							got.reset_after_ms]::numeric[] IS DISTINCT FROM exp
				 THEN ' MISMATCH, the rules say ' || exp::text ELSE '' END);
	END LOOP;
	PERFORM rl_reset(k, 'pc.policy');
	DELETE FROM rl_policies WHERE name = 'pc.policy';
END
$$;

-- By name, on Redis.
SELECT pc_play('fixed_window', 'pc:fw', 'pc.policy');
SELECT pc_play('sliding_log', 'pc:sl', 'pc.policy');
SELECT pc_play('sliding_counter', 'pc:sc', 'pc.policy');
SELECT pc_play('token_bucket', 'pc:tb', 'pc.policy');
SELECT pc_play('leaky_bucket', 'pc:lb', 'pc.policy');
SELECT pc_play('gcra', 'pc:gc', 'pc.policy');
-- The parameter forms: nothing carried, every parameter set its own
-- limiter, as 0.4.0 answers.
SELECT pc_play('fixed_window', 'pc:fw', NULL);
SELECT pc_play('sliding_log', 'pc:sl', NULL);
SELECT pc_play('sliding_counter', 'pc:sc', NULL);
SELECT pc_play('token_bucket', 'pc:tb', NULL);
SELECT pc_play('leaky_bucket', 'pc:lb', NULL);
SELECT pc_play('gcra', 'pc:gc', NULL);
SELECT count(*) AS redis_mismatches FROM pc_mismatch;
TRUNCATE pc_mismatch;

-- The same on the local engine, with Redis out of reach (as local.sql).
SET ratelimit.engine = local;
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
SET ratelimit.failure_mode = error;
SELECT pc_play('fixed_window', 'pc:fw', 'pc.policy');
SELECT pc_play('sliding_log', 'pc:sl', 'pc.policy');
SELECT pc_play('sliding_counter', 'pc:sc', 'pc.policy');
SELECT pc_play('token_bucket', 'pc:tb', 'pc.policy');
SELECT pc_play('leaky_bucket', 'pc:lb', 'pc.policy');
SELECT pc_play('gcra', 'pc:gc', 'pc.policy');
SELECT pc_play('fixed_window', 'pc:fw', NULL);
SELECT pc_play('sliding_log', 'pc:sl', NULL);
SELECT pc_play('sliding_counter', 'pc:sc', NULL);
SELECT pc_play('token_bucket', 'pc:tb', NULL);
SELECT pc_play('leaky_bucket', 'pc:lb', NULL);
SELECT pc_play('gcra', 'pc:gc', NULL);
SELECT count(*) AS local_mismatches FROM pc_mismatch;

DROP FUNCTION pc_play(text, text, text);
DROP FUNCTION pc_model(text, text, numeric, numeric, numeric, numeric, numeric);
DROP FUNCTION pc_ms(numeric, numeric);
DROP FUNCTION pc_cdiv(numeric, numeric);
DROP FUNCTION pc_fdiv(numeric, numeric);
DROP TABLE pc_script, pc_state, pc_log, pc_mismatch;
