/*-------------------------------------------------------------------------
 *
 * rl_local_algo.c
 *	  The six algorithms of lua/, in C, for the local engine.
 *
 * Each function here is its Lua script line by line, computed the way Lua
 * computes it: every number is a double (a Lua number), a % b is Lua's
 * a - floor(a / b) * b, and the operations come in the script's order.
 * IEEE arithmetic is deterministic, so for the same arguments and clock
 * the answers and the state are those of the script, to the last bit
 * (test/t/023_local_diff.pl compares them).  The state fields are the
 * script's hash fields, in st[]:
 *	 fixed_window		w, n
 *	 sliding_counter	w, cur, prev
 *	 token_bucket		credit, ts, unit
 *	 leaky_bucket		level, ts, unit
 *	 gcra				us, r, d, ts  (the string "<us>+<r>/<d>@<ts>")
 *	 sliding_log		a chain of members (time, cum) in rl_local_log.c
 * and a named policy's (carry, common.lua's rl_carry_state):
 *	 fixed_window		w, n, window
 *	 sliding_counter	w, cur, prev, window
 *	 token_bucket		debt, ts, unit, rate
 *	 leaky_bucket		level, ts, unit, rate
 *	 gcra				debt, ts, unit, rate
 * Where a script writes nothing (a peek, a denial) nothing is written, but
 * for a policy's state read under other parameters, which is written back
 * converted at once, as the script does.  The refunds (rl_local_refund)
 * are the scripts' <algo>_refund functions (lua/refund.lua) likewise.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/local/rl_local_algo.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "rl_local.h"

/* Lua 5.1's a % b (luai_nummod). */
static inline double
lmod(double a, double b)
{
	return a - floor(a / b) * b;
}

/* Lua 5.1's math.max and math.min of two numbers. */
static inline double
lmax(double a, double b)
{
	return b > a ? b : a;
}

static inline double
lmin(double a, double b)
{
	return b < a ? b : a;
}

/* common.lua: rl_gcd and rl_ms. */
static double
rl_gcd(double a, double b)
{
	while (b != 0)
	{
		double		t = lmod(a, b);

		a = b;
		b = t;
	}
	return a;
}

static inline double
rl_ms(double us)
{
	if (us <= 0)
		return 0;
	return ceil(us / 1000);
}

/* rl_expire: the TTL of a write, in ms. */
static inline double
rl_ttl(double us)
{
	return lmax(1, rl_ms(us));
}

/* common.lua's rl_up: v in units of 1/from, in units of 1/to, rounded up. */
static inline double
rl_up(double v, double from, double to)
{
	double		x;

	if (from == to)
		return v;
	x = v * to;
	if (x < 9007199254740992.0)
		return ceil(x / from);
	return ceil(v / from * to) + 2;
}

/*
 * A policy's state converted to the current parameters, written back at
 * once with their TTL (common.lua's rl_write of an rl_carry_state).
 */
static void
rl_carry_write(RlLocalEntry *e, double a, double b, double c, double d,
			   double reset, double now)
{
	e->u.st[0] = a;
	e->u.st[1] = b;
	e->u.st[2] = c;
	e->u.st[3] = d;
	e->expires_at = (int64) now + (int64) rl_ttl(reset) * 1000;
}

/* fixed_window.lua */
static void
rl_fixed_window(RlLocalEntry *e, double limit, double window, double cost,
				double now, bool carry, RlLocalResult *res)
{
	double		start = now - lmod(now, window);
	double		used = 0;
	double		ends;
	double		reset;

	if (carry)
	{
		if (e != NULL && e->valid)
		{
			double		w = e->u.st[0];
			double		n = e->u.st[1];
			double		was = e->u.st[2];
			double		at = now;

			if (w > at)
				at = w;
			if (at < w + was)
			{
				start = at - lmod(at, window);
				used = lmin(limit, n);
				if (was != window)
					rl_carry_write(e, start, n, window, 0,
								   start + window - now, now);
			}
		}
	}
	else if (e != NULL && e->valid)
	{
		double		w = e->u.st[0];

		w = w - lmod(w, window);
		if (w >= start)
		{
			start = w;
			used = lmin(limit, e->u.st[1]);
		}
	}
	ends = start + window;
	if (used + cost > limit)
	{
		res->ok = false;
		res->remaining = limit - used;
		res->retry = ends - now;
		res->reset = ends - now;
		return;
	}
	used = used + cost;
	reset = 0;
	if (used > 0)
		reset = ends - now;
	res->ok = true;
	res->remaining = limit - used;
	res->retry = 0;
	res->reset = reset;
	if (cost > 0)
	{
		res->apply = true;
		res->st[0] = start;
		res->st[1] = used;
		if (carry)
			res->st[2] = window;
		res->ttl_ms = rl_ttl(reset);
		res->r1 = start;
	}
}

/* token_bucket.lua */
static void
rl_token_bucket(RlLocalEntry *e, double limit, double window, double cost,
				double burst, double now, bool carry, RlLocalResult *res)
{
	double		g = rl_gcd(limit, window);
	double		unit = window / g;
	double		rate = limit / g;
	double		full = burst * unit;	/* the capacity */
	double		credit = full;
	double		ts = now;
	double		shift;
	double		need;
	double		reset;
	bool		have = false;

	if (carry)
	{
		if (e != NULL && e->valid)
		{
			double		d = e->u.st[0];
			double		t = e->u.st[1];
			double		was = e->u.st[2];
			double		wrate = e->u.st[3];

			if ((now - t) * wrate < d)
			{
				double		debt = lmin(full, rl_up(d, was, unit));

				if (debt != d || was != unit || wrate != rate)
					rl_carry_write(e, debt, t, unit, rate,
								   t + debt / rate - now, now);
				credit = full - debt;
				ts = t;
				have = true;
			}
		}
	}
	else if (e != NULL && e->valid)
	{
		double		was = e->u.st[2];

		credit = e->u.st[0];
		ts = e->u.st[1];
		if (was != unit)
			credit = floor(credit / was * unit);
		have = true;
	}
	if (have)
	{
		if (now > ts)
		{
			credit = credit + (now - ts) * rate;
			ts = now;
		}
		credit = lmin(full, credit);
	}
	shift = ts - now;
	need = cost * unit;
	if (credit < need)
	{
		res->ok = false;
		res->remaining = floor(credit / unit);
		res->retry = shift + (need - credit) / rate;
		res->reset = shift + (full - credit) / rate;
		return;
	}
	credit = credit - need;
	reset = shift + (full - credit) / rate;
	res->ok = true;
	res->remaining = floor(credit / unit);
	res->retry = 0;
	res->reset = reset;
	if (cost > 0)
	{
		res->apply = true;
		res->st[0] = carry ? full - credit : credit;
		res->st[1] = ts;
		res->st[2] = unit;
		if (carry)
			res->st[3] = rate;
		res->ttl_ms = rl_ttl(reset);
		res->r1 = ts;
		res->r2 = full - credit;
	}
}

/* leaky_bucket.lua */
static void
rl_leaky_bucket(RlLocalEntry *e, double limit, double window, double cost,
				double burst, double now, bool carry, RlLocalResult *res)
{
	double		g = rl_gcd(limit, window);
	double		unit = window / g;
	double		rate = limit / g;
	double		full = burst * unit;	/* the capacity */
	double		level = 0;
	double		ts = now;
	double		shift;
	double		pour;
	double		reset;
	bool		have = false;

	if (carry)
	{
		if (e != NULL && e->valid)
		{
			double		l = e->u.st[0];
			double		t = e->u.st[1];
			double		was = e->u.st[2];
			double		wrate = e->u.st[3];

			if ((now - t) * wrate < l)
			{
				double		kept = lmin(full, rl_up(l, was, unit));

				if (kept != l || was != unit || wrate != rate)
					rl_carry_write(e, kept, t, unit, rate,
								   t + kept / rate - now, now);
				level = kept;
				ts = t;
				have = true;
			}
		}
	}
	else if (e != NULL && e->valid)
	{
		double		was = e->u.st[2];

		level = e->u.st[0];
		ts = e->u.st[1];
		if (was != unit)
			level = ceil(level / was * unit);
		if (level > full)
			level = full;
		have = true;
	}
	if (have)
	{
		if (now > ts)
		{
			level = lmax(0, level - (now - ts) * rate);
			ts = now;
		}
	}
	shift = ts - now;
	pour = cost * unit;
	if (level + pour > full)
	{
		res->ok = false;
		res->remaining = floor(lmax(0, full - level) / unit);
		res->retry = shift + (level + pour - full) / rate;
		res->reset = shift + level / rate;
		return;
	}
	level = level + pour;
	reset = 0;
	if (level > 0)
		reset = shift + level / rate;
	res->ok = true;
	res->remaining = floor((full - level) / unit);
	res->retry = 0;
	res->reset = reset;
	if (cost > 0)
	{
		res->apply = true;
		res->st[0] = level;
		res->st[1] = ts;
		res->st[2] = unit;
		if (carry)
			res->st[3] = rate;
		res->ttl_ms = rl_ttl(reset);
		res->r1 = ts;
		res->r2 = level;
	}
}

/*
 * gcra.lua.  The local engine never holds a 0.1.0 state, so the legacy
 * branch (no "@<ts>") has nothing to read here.
 */
static void
rl_gcra(RlLocalEntry *e, double limit, double window, double cost,
		double burst, double now, bool carry, RlLocalResult *res)
{
	double		g = rl_gcd(limit, window);
	double		unit = window / g;
	double		rate = limit / g;
	double		full = burst * unit;	/* the capacity */
	double		debt = 0;
	double		after;

	if (carry)
	{
		/* gcra.lua's rl_gcra_carried */
		if (e != NULL && e->valid)
		{
			double		d = e->u.st[0];
			double		t = e->u.st[1];
			double		was = e->u.st[2];
			double		wrate = e->u.st[3];

			if ((now - t) * wrate < d)
			{
				double		kept = lmin(full, rl_up(d, was, unit));

				if (kept != d || was != unit || wrate != rate)
					rl_carry_write(e, kept, t, unit, rate,
								   t + kept / rate - now, now);
				debt = kept - (now - t) * rate;
				if (debt < 0)
					debt = 0;
			}
		}
	}
	else if (e != NULL && e->valid)
	{
		double		us = e->u.st[0];
		double		r = e->u.st[1];
		double		d = e->u.st[2];
		double		ts = e->u.st[3];

		if (d != rate)
			r = ceil(r * rate / d);
		debt = (us - ts) * rate + r;
		if (debt > full)
			debt = full;
		debt = debt - (now - ts) * rate;
		if (debt < 0)
			debt = 0;
	}
	after = debt + cost * unit;
	if (after > full)
	{
		res->ok = false;
		res->remaining = floor((full - debt) / unit);
		res->retry = (after - full) / rate;
		res->reset = debt / rate;
		return;
	}
	res->ok = true;
	res->remaining = floor((full - after) / unit);
	res->retry = 0;
	res->reset = after / rate;
	if (cost > 0 && carry)
	{
		res->apply = true;
		res->st[0] = after;
		res->st[1] = now;
		res->st[2] = unit;
		res->st[3] = rate;
		res->ttl_ms = lmax(1, rl_ms(after / rate));
		res->r1 = now;
		res->r2 = after;
	}
	else if (cost > 0)
	{
		double		r = lmod(after, rate);

		res->r1 = now;
		res->r2 = after;

		res->apply = true;
		res->st[0] = now + (after - r) / rate;
		res->st[1] = r;
		res->st[2] = rate;
		res->st[3] = now;
		res->ttl_ms = lmax(1, rl_ms(after / rate));
	}
}

/* sliding_counter.lua */
static void
rl_sliding_counter(RlLocalEntry *e, double limit, double window, double cost,
				   double now, bool carry, RlLocalResult *res)
{
	double		at = now;
	double		start = now - lmod(now, window);
	double		cur = 0;
	double		prev = 0;
	double		kept = 0;		/* carry: prev as kept, uncapped */
	double		shift;
	double		left;
	double		used;
	double		remaining;
	double		reset;

	if (carry)
	{
		if (e != NULL && e->valid)
		{
			double		w = e->u.st[0];
			double		c = e->u.st[1];
			double		p = e->u.st[2];
			double		was = e->u.st[3];

			if (w > at)
				at = w;
			start = at - lmod(at, window);
			if (at < w + was + was)
			{
				double		m = lmin(at, w + was - 1);

				if (m >= start)
					cur = c;
				else if (m >= start - window)
					kept = c;
			}
			if (at < w + was)
			{
				double		m = w - 1;

				if (m >= start)
					cur = cur + p;
				else if (m >= start - window)
					kept = kept + p;
			}
			if (was != window && cur + kept > 0)
				rl_carry_write(e, start, cur, kept, window,
							   (cur > 0 ? start + window + window :
								start + window) - now, now);
			cur = lmin(limit, cur);
			prev = lmin(limit, kept);
		}
	}
	else if (e != NULL && e->valid)
	{
		double		w = e->u.st[0];

		w = w - lmod(w, window);
		if (w >= start)
		{
			if (w > start)
				at = w;
			start = w;
			cur = lmin(limit, e->u.st[1]);
			prev = lmin(limit, e->u.st[2]);
		}
		else if (w == start - window)
			prev = lmin(limit, e->u.st[1]);
	}
	shift = at - now;
	left = window - (at - start);
	used = prev * left + cur * window;
	remaining = limit - cur - ceil(prev * left / window);

	if (used + cost * window > limit * window)
	{
		double		wait;

		if (cur + cost <= limit)
			wait = left - (limit - cur - cost) * window / prev;
		else
			wait = left + window - (limit - cost) * window / cur;
		reset = left;
		if (cur > 0)
			reset = left + window;
		res->ok = false;
		res->remaining = lmax(0, remaining);
		res->retry = shift + wait;
		res->reset = shift + reset;
		return;
	}
	reset = 0;
	if (cur + cost > 0)
		reset = shift + left + window;
	else if (prev > 0)
		reset = shift + left;
	res->ok = true;
	res->remaining = lmax(0, remaining - cost);
	res->retry = 0;
	res->reset = reset;
	if (cost > 0)
	{
		res->apply = true;
		res->st[0] = start;
		res->st[1] = cur + cost;
		res->st[2] = carry ? kept : prev;
		if (carry)
			res->st[3] = window;
		res->ttl_ms = rl_ttl(reset);
		res->r1 = start;
	}
}

/*
 * sliding_log.lua, on a chain of (time, cum) members in call order.  As
 * in the script, the units in the window are the newest cum minus the cum
 * before the first member after floor, and the unit a denial waits for
 * is the first member whose cum reaches it.  Members at or before floor
 * are dropped as the script drops them (64 at most per admitted call, all
 * when the window is empty), so that a clock that steps back sees the
 * same members as Redis would.
 */
static void
rl_sliding_log(RlLocalEntry *e, double limit, double window, double cost,
			   double now, bool carry, RlLocalResult *res)
{
	bool		has_newest = e != NULL && e->valid && e->log >= 0 &&
		e->u.lg.count > 0;
	double		floor_t = now - window;
	double		stamp = now;
	double		newest_t = 0;
	double		used = 0;
	double		first_cost = 0;
	int			expired = 0;
	int			first = -1;		/* the first member in the window */
	double		reset;

	if (has_newest)
	{
		RlLocalMember *newest = rl_local_log_at(e, e->u.lg.count - 1);

		newest_t = newest->t;
		if (newest_t > now)
			stamp = newest_t;
		if (newest_t > floor_t)
		{
			uint64		before;

			expired = rl_local_log_first_after(e, floor_t);
			first = expired;
			before = rl_local_log_cum_before(e, first);
			first_cost = (double) (rl_local_log_at(e, first)->cum - before);
			used = (double) (newest->cum - before);
		}
	}

	reset = 0;
	if (used > 0)
	{
		reset = newest_t + window - now;

		/*
		 * A policy's window raised since the last write: the entry lives
		 * as long as its members count (the script's PEXPIRE).
		 */
		if (carry && (double) e->expires_at < newest_t + window)
			e->expires_at = (int64) now + (int64) rl_ttl(reset) * 1000;
	}

	if (used + cost > limit)
	{
		double		k = used + cost - limit;
		double		wait_t = newest_t;

		if (first < 0)
		{
			/* Not reached: a cost is at most the limit (rl_check_cost). */
		}
		else if (k <= first_cost)
			wait_t = rl_local_log_at(e, first)->t;
		else
			wait_t = rl_local_log_at(e, rl_local_log_reach(e, first,
														   (uint64) k))->t;
		res->ok = false;
		res->remaining = limit - used;
		res->retry = wait_t + window - now;
		res->reset = reset;
		return;
	}
	if (cost == 0)
	{
		res->ok = true;
		res->remaining = limit - used;
		res->retry = 0;
		res->reset = reset;
		return;
	}
	reset = stamp + window - now;
	res->ok = true;
	res->remaining = limit - used - cost;
	res->retry = 0;
	res->reset = reset;
	res->apply = true;
	res->log_clear = !has_newest || used == 0;
	res->log_prune = res->log_clear ? 0 : Min(expired, 64);
	res->log_stamp = stamp;
	res->log_cost = cost;
	res->ttl_ms = rl_ttl(reset);

	/*
	 * The receipt: the member's time and cum, the cum as the script keeps
	 * it (below RL_LOG_WRAP; the script's wrap waits for a later time,
	 * which only a log of 10^15 units would see).
	 */
	res->r1 = stamp;
	res->r2 = (double) (((res->log_clear ? 0 :
						  rl_local_log_at(e, e->u.lg.count - 1)->cum) +
						 (uint64) cost) % RL_LOCAL_LOG_WRAP);
}

/*
 * Runs one algorithm on an entry (NULL or not valid: no state) as its
 * script would; res says what to answer and what to write.  carry: a
 * named policy's limiter (its state's form above); a state of other
 * parameters is converted and written back here, as the script does.
 */
void
rl_local_algorithm(int algorithm, RlLocalEntry *entry, double limit,
				   double window, double cost, double burst, double now,
				   bool carry, RlLocalResult *res)
{
	memset(res, 0, sizeof(*res));
	switch ((RlAlgorithm) algorithm)
	{
		case RL_FIXED_WINDOW:
			rl_fixed_window(entry, limit, window, cost, now, carry, res);
			break;
		case RL_SLIDING_LOG:
		case RL_CONCURRENCY:
			rl_sliding_log(entry, limit, window, cost, now, carry, res);
			break;
		case RL_SLIDING_COUNTER:
			rl_sliding_counter(entry, limit, window, cost, now, carry, res);
			break;
		case RL_TOKEN_BUCKET:
			rl_token_bucket(entry, limit, window, cost, burst, now, carry,
							res);
			break;
		case RL_LEAKY_BUCKET:
			rl_leaky_bucket(entry, limit, window, cost, burst, now, carry,
							res);
			break;
		case RL_GCRA:
			rl_gcra(entry, limit, window, cost, burst, now, carry, res);
			break;
		default:
			elog(ERROR, "unknown rate limiting algorithm %d", algorithm);
	}
}

/*
 * Writes what rl_local_algorithm decided into the entry (reserved by the
 * caller) and sets its expiry, as the script's HSET/ZADD and PEXPIRE do.
 * A sliding log must have room for its member (rl_local_log_room).
 */
void
rl_local_write(int algorithm, RlLocalEntry *entry, const RlLocalResult *res,
			   double now)
{
	if (rl_algorithm_logs(algorithm))
	{
		if (res->log_clear || !entry->valid)
			rl_local_log_clear(entry);
		else
			rl_local_log_prune(entry, res->log_prune);
		rl_local_log_push(entry, res->log_stamp, (uint64) res->log_cost);
	}
	else
		memcpy(entry->u.st, res->st, sizeof(entry->u.st));
	entry->valid = true;
	entry->expires_at = (int64) now + (int64) res->ttl_ms * 1000;
}

/*
 * The refunds: each algorithm's <algo>_refund of lua/, on an entry.  A
 * state that is now a fresh limiter's is dropped (the script's DEL): the
 * entry is left not valid, its log freed, for the caller to release
 * (rl_local_release, which needs the key's hash).  Anything else written
 * keeps the entry's expiry (SET ... KEEPTTL).
 */
static bool
rl_refund_fresh(RlLocalEntry *e)
{
	rl_local_log_free(e);
	e->valid = false;
	return true;
}

/* fixed_window.lua's fixed_window_refund */
static bool
rl_fixed_window_refund(RlLocalEntry *e, double cost, double r1)
{
	double		n = e->u.st[1];

	if (e->u.st[0] != r1 || n <= 0 || cost <= 0)
		return false;
	n = lmax(0, n - cost);
	if (n == 0)
		return rl_refund_fresh(e);
	e->u.st[1] = n;
	return true;
}

/* sliding_counter.lua's sliding_counter_refund */
static bool
rl_sliding_counter_refund(RlLocalEntry *e, double window, bool carry,
						  double cost, double r1)
{
	double		w = e->u.st[0];
	double		cur = e->u.st[1];
	double		prev = e->u.st[2];
	double		was = carry ? e->u.st[3] : window;

	if (cost <= 0)
		return false;
	if (w == r1 && cur > 0)
		cur = lmax(0, cur - cost);
	else if (w == r1 + was && prev > 0)
		prev = lmax(0, prev - cost);
	else
		return false;
	if (cur == 0 && prev == 0)
		return rl_refund_fresh(e);
	e->u.st[1] = cur;
	e->u.st[2] = prev;
	return true;
}

/*
 * common.lua's rl_refund_give: what a bucket's or GCRA's refund gives
 * back, in credit units: the cost, but no more than the debt the call
 * left (r2, at the state's time r1) less what drained or refilled between
 * r1 and the state's time ts.
 */
static double
rl_refund_give(double cost, double unit, double rate, double r1, double r2,
			   double ts)
{
	double		give = cost * unit;
	double		left = r2 - lmax(0, ts - r1) * rate;

	return left < give ? lmax(0, left) : give;
}

/*
 * A policy's bucket or GCRA state (debt or level, ts, unit, rate), the
 * same in the three scripts' refunds: rl_refund_give's share less, never
 * below 0, when the state is in the call's scale (unit, rate); none left
 * by now is a fresh limiter.
 */
static bool
rl_carried_refund(RlLocalEntry *e, double unit, double rate, double cost,
				  double r1, double r2, double now)
{
	double		debt = e->u.st[0];
	double		ts = e->u.st[1];
	double		give;

	if (cost <= 0 || debt <= 0 || e->u.st[2] != unit || e->u.st[3] != rate)
		return false;
	give = rl_refund_give(cost, unit, rate, r1, r2, ts);
	if (give <= 0)
		return false;
	debt = lmax(0, debt - give);
	if (debt <= lmax(0, now - ts) * rate)
		return rl_refund_fresh(e);
	e->u.st[0] = debt;
	return true;
}

/* token_bucket.lua's token_bucket_refund */
static bool
rl_token_bucket_refund(RlLocalEntry *e, double limit, double window,
					   double capacity, bool carry, double cost, double r1,
					   double r2, double now)
{
	double		g = rl_gcd(limit, window);
	double		unit = window / g;
	double		rate = limit / g;
	double		full = capacity * unit;
	double		credit = e->u.st[0];
	double		ts = e->u.st[1];
	double		give;

	if (carry)
		return rl_carried_refund(e, unit, rate, cost, r1, r2, now);
	if (cost <= 0 || e->u.st[2] != unit || credit >= full)
		return false;
	give = rl_refund_give(cost, unit, rate, r1, r2, ts);
	if (give <= 0)
		return false;
	credit = lmin(full, credit + give);
	if (credit + lmax(0, now - ts) * rate >= full)
		return rl_refund_fresh(e);
	e->u.st[0] = credit;
	return true;
}

/* leaky_bucket.lua's leaky_bucket_refund */
static bool
rl_leaky_bucket_refund(RlLocalEntry *e, double limit, double window,
					   bool carry, double cost, double r1, double r2,
					   double now)
{
	double		g = rl_gcd(limit, window);
	double		unit = window / g;
	double		rate = limit / g;
	double		level = e->u.st[0];
	double		ts = e->u.st[1];
	double		give;

	if (carry)
		return rl_carried_refund(e, unit, rate, cost, r1, r2, now);
	if (cost <= 0 || e->u.st[2] != unit || level <= 0)
		return false;
	give = rl_refund_give(cost, unit, rate, r1, r2, ts);
	if (give <= 0)
		return false;
	level = lmax(0, level - give);
	if (level <= lmax(0, now - ts) * rate)
		return rl_refund_fresh(e);
	e->u.st[0] = level;
	return true;
}

/* gcra.lua's gcra_refund */
static bool
rl_gcra_refund(RlLocalEntry *e, double limit, double window, bool carry,
			   double cost, double r1, double r2, double now)
{
	double		g = rl_gcd(limit, window);
	double		unit = window / g;
	double		rate = limit / g;
	double		ts = e->u.st[3];
	double		debt;
	double		give;
	double		r;

	if (carry)
		return rl_carried_refund(e, unit, rate, cost, r1, r2, now);
	if (cost <= 0 || e->u.st[2] != rate)
		return false;
	debt = (e->u.st[0] - ts) * rate + e->u.st[1];
	if (debt <= 0)
		return false;
	give = rl_refund_give(cost, unit, rate, r1, r2, ts);
	if (give <= 0)
		return false;
	debt = lmax(0, debt - give);
	if (debt <= lmax(0, now - ts) * rate)
		return rl_refund_fresh(e);
	r = lmod(debt, rate);
	e->u.st[0] = ts + (debt - r) / rate;
	e->u.st[1] = r;
	return true;
}

/*
 * sliding_log.lua's sliding_log_refund_many, one call: the member goes,
 * those after it rewritten (rl_local_log_refund); a log left empty is a
 * fresh limiter.
 */
static bool
rl_sliding_log_refund(RlLocalEntry *e, double cost, double r1, double r2)
{
	if (cost <= 0 || e->log < 0 || e->u.lg.count == 0 ||
		!rl_local_log_refund(e, r1, (uint64) cost, (uint64) r2))
		return false;
	if (e->u.lg.count == 0)
		return rl_refund_fresh(e);
	return true;
}

/*
 * Gives back cost units taken by an admitted call whose receipt is r1, r2
 * (lua/refund.lua, through its algorithm's <algo>_refund), on the entry
 * of its key (NULL: none), as the script does it on the key: true when
 * the state changed.  An entry past its expiry at now is a key Redis
 * would have dropped: nothing to give back.  When the state is now a
 * fresh limiter's, the entry is left not valid: the caller releases it.
 * The caller holds the entry's partition lock.
 */
bool
rl_local_refund(int algorithm, RlLocalEntry *entry, double limit,
				double window, double capacity, bool carry, double cost,
				double r1, double r2, double now)
{
	if (entry == NULL || !entry->valid || (double) entry->expires_at <= now)
		return false;
	switch ((RlAlgorithm) algorithm)
	{
		case RL_FIXED_WINDOW:
			return rl_fixed_window_refund(entry, cost, r1);
		case RL_SLIDING_LOG:
		case RL_CONCURRENCY:
			return rl_sliding_log_refund(entry, cost, r1, r2);
		case RL_SLIDING_COUNTER:
			return rl_sliding_counter_refund(entry, window, carry, cost, r1);
		case RL_TOKEN_BUCKET:
			return rl_token_bucket_refund(entry, limit, window, capacity,
										  carry, cost, r1, r2, now);
		case RL_LEAKY_BUCKET:
			return rl_leaky_bucket_refund(entry, limit, window, carry, cost,
										  r1, r2, now);
		case RL_GCRA:
			return rl_gcra_refund(entry, limit, window, carry, cost, r1, r2,
								  now);
		default:
			/* Runs under a partition lock in an abort: no ERROR here. */
			break;
	}
	return false;
}
