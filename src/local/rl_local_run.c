/*-------------------------------------------------------------------------
 *
 * rl_local_run.c
 *	  The local store: checks answered from this server's shared memory.
 *
 * The operations of rl_store.h for the local engine.  A check of one
 * limiter mirrors its algorithm's script (lua/allow.lua), rules checked
 * together mirror lua/layered.lua, with the algorithms of rl_local_algo.c,
 * so that both stores answer alike (test/t/024_local.pl compares them).
 * A check's keys are locked together (their partitions in ascending
 * order), so it is atomic as a script is.
 *
 * A check that needs a new entry when the table is full, or an admitted
 * sliding-log check when the pool of log members is, is left unanswered
 * with the store's failure (reason RL_FAILED_FULL, the setting to raise):
 * the failure policy answers it and warns.  Nothing here touches WAL or
 * takes a transaction id, so the store works on hot standbys and in READ
 * ONLY transactions.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/local/rl_local_run.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "miscadmin.h"

#include "rl_local.h"

/* What one check answered, as the scripts' replies number it. */
typedef struct RlLocalReply
{
	int			n;				/* 4, or 5 with the rule index (from 1) */
	int64		v[5];
} RlLocalReply;

/* Why this store last left a check unanswered, for the failure policy. */
static RlFailure rl_local_failure;

/*
 * Room for what an admitted call writes: a sliding log's next member.
 * Taken after the algorithm has run and before anything is written, so
 * a denial needs no room and a write cannot fail half-way.  When the
 * logs' pool is empty, the table frees expired entries (held: what the
 * call holds, which stays) and the log tries again, for as long as that
 * frees blocks.
 */
static bool
rl_local_room(int algorithm, RlLocalEntry *e, const RlLocalResult *res,
			  double now, int need, const RlLocalHeld *held)
{
	if (!rl_algorithm_logs(algorithm) || !res->apply)
		return true;
	while (!rl_local_log_room(e, need))
	{
		if (!rl_local_reclaim_for_log(now, held))
			return false;
	}
	return true;
}

/* The receipt of a rule (lua/common.lua's rl_one), into receipt. */
static inline void
rl_local_receipt(RlReceipt *receipt, const RlLocalResult *res, bool taken)
{
	receipt->r1 = taken ? (int64) res->r1 : 0;
	receipt->r2 = taken ? (int64) res->r2 : 0;
}

/*
 * allow.lua: one key, one algorithm, at the pinned clock (0: the wall
 * clock).  RL_ROOM_OK, or why there was no room (nothing was changed
 * then).  receipt (NULL: not kept) gets what an admitted call took.
 */
static RlLocalRoom
rl_local_allow_key(int algorithm, const char *key, size_t len, double limit,
				   double window, double cost, double burst, bool carry,
				   double pinned, RlLocalReply *out, RlReceipt *receipt)
{
	uint64		hash = rl_local_hash(key, len);
	int			part = rl_local_partition(hash);
	RlLocalEntry *e;
	RlLocalResult res;
	RlLocalRoom room = RL_ROOM_OK;
	bool		full;
	double		wall = pinned > 0 ? 0 : rl_local_wall_clock();
	double		now;

	rl_local_lock(&part, 1);
	now = rl_local_clock(&part, 1, pinned, wall);
	e = rl_local_find(key, len, hash, now, cost > 0, &full, NULL, 0);
	if (full)
	{
		rl_local_unlock(&part, 1);
		return RL_ROOM_NO_ENTRY;
	}
	rl_local_algorithm(algorithm, e, limit, window, cost, burst, now, carry,
					   &res);
	out->n = 4;
	if (!res.ok && cost > 0)
	{
		out->v[0] = 0;
		out->v[1] = (int64) Max(0, res.remaining);
		out->v[2] = (int64) Max(1, (res.retry <= 0 ? 0 : ceil(res.retry / 1000)));
		out->v[3] = (int64) (res.reset <= 0 ? 0 : ceil(res.reset / 1000));
		if (receipt != NULL)
			rl_local_receipt(receipt, &res, false);
	}
	else if (res.ok && res.apply &&
			 !rl_local_room(algorithm, e, &res, now, 1,
							&(RlLocalHeld) {&part, 1, &e, 1}))
		room = RL_ROOM_NO_LOG;
	else
	{
		if (res.ok && res.apply)
			rl_local_write(algorithm, e, &res, now);
		out->v[0] = 1;
		out->v[1] = (int64) Max(0, res.remaining);
		out->v[2] = 0;
		out->v[3] = (int64) (res.reset <= 0 ? 0 : ceil(res.reset / 1000));
		if (receipt != NULL)
			rl_local_receipt(receipt, &res, res.ok && res.apply);
	}
	if (e != NULL && !e->valid)
		rl_local_release(e, hash);
	rl_local_unlock(&part, 1);
	return room;
}

static int
rl_local_cmp_int(const void *a, const void *b)
{
	return *(const int *) a - *(const int *) b;
}

/* The distinct partitions of n hashes, ascending: how many there are. */
static int
rl_local_parts(const uint64 *hashes, int n, int *parts)
{
	bool		seen[RL_LOCAL_PARTITIONS] = {0};
	int			m = 0;

	for (int i = 0; i < n; i++)
	{
		int			p = rl_local_partition(hashes[i]);

		if (!seen[p])
		{
			seen[p] = true;
			parts[m++] = p;
		}
	}
	qsort(parts, m, sizeof(int), rl_local_cmp_int);
	return m;
}

static inline double
rl_local_ms(double us)
{
	return us <= 0 ? 0 : ceil(us / 1000);
}

/*
 * layered.lua: every rule checked, all consumed or none.  RL_ROOM_OK, or
 * why there was no room (nothing was changed then).  The check's receipts
 * (when it keeps them) get what each rule took when all were admitted and
 * consumed, zeros otherwise.  Check-only (the
 * check round of a statement over many hash slots, asked of this store by
 * failure_mode = local) checks the rules as the script's '?' does: the
 * answer is the one a consuming check would give, and nothing is written
 * or reserved, so it never needs room.
 */
static RlLocalRoom
rl_local_rules(const RlCheck *check, double pinned, RlLocalReply *out)
{
	int			n = check->nrules;
	bool		check_only = check->check_only;
	double		wall = pinned > 0 ? 0 : rl_local_wall_clock();
	double		now;
	double	   *burst = palloc(sizeof(double) * n);
	uint64	   *hashes = palloc(sizeof(uint64) * n);
	int		   *algo = palloc(sizeof(int) * n);
	bool	   *carry = palloc(sizeof(bool) * n);
	double	   *limit = palloc(sizeof(double) * n);
	double	   *window = palloc(sizeof(double) * n);
	double	   *cost = palloc(sizeof(double) * n);
	RlLocalEntry **entries = palloc0(sizeof(RlLocalEntry *) * n);
	RlLocalResult *res = palloc(sizeof(RlLocalResult) * n);
	int			parts[RL_LOCAL_PARTITIONS];
	int			nparts;
	bool		all_ok = true;
	bool		full = false;
	RlLocalRoom room = RL_ROOM_OK;
	double		remaining = -1;
	double		retry = 0;
	double		reset = 0;
	int			tightest = 1;

	for (int i = 0; i < n; i++)
	{
		const RlLimiter *l = rl_check_limiter_of(check, i);

		hashes[i] = rl_local_hash(check->keys[i], strlen(check->keys[i]));
		algo[i] = l->algorithm;
		carry[i] = l->carry;
		limit[i] = (double) l->limit;
		window[i] = (double) l->window_us;
		burst[i] = (double) rl_capacity(l);
		cost[i] = (double) check->costs[i];
	}
	nparts = rl_local_parts(hashes, n, parts);

	rl_local_lock(parts, nparts);
	now = rl_local_clock(parts, nparts, pinned, wall);
	/* The entries found so far are kept from the reclaim of a full one. */
	for (int i = 0; i < n && !full; i++)
		entries[i] = rl_local_find(check->keys[i], strlen(check->keys[i]),
								   hashes[i], now, cost[i] > 0 && !check_only,
								   &full, entries, i);
	if (full)
		room = RL_ROOM_NO_ENTRY;
	else
	{
		for (int i = 0; i < n; i++)
		{
			rl_local_algorithm(algo[i], entries[i], limit[i], window[i],
							   cost[i], burst[i], now, carry[i], &res[i]);
			/* A rule asked for nothing admits (a peek), whatever its state. */
			if (cost[i] == 0)
				res[i].ok = true;
			if (!res[i].ok)
				all_ok = false;
		}
		if (all_ok)
		{
			for (int i = 0; i < n; i++)
			{
				double		left = Max(0, res[i].remaining);

				if (remaining < 0 || left < remaining)
				{
					remaining = left;
					tightest = i + 1;
				}
				reset = Max(reset, rl_local_ms(res[i].reset));
			}
			/* The same rule twice is one entry, written twice. */
			for (int i = 0; i < n && room == RL_ROOM_OK && !check_only; i++)
			{
				int			need = 1;

				for (int k = 0; k < i; k++)
					need += entries[k] == entries[i] && res[k].apply;
				if (!rl_local_room(algo[i], entries[i], &res[i], now, need,
								   &(RlLocalHeld) {parts, nparts, entries, n}))
					room = RL_ROOM_NO_LOG;
			}
			for (int i = 0; i < n && room == RL_ROOM_OK && !check_only; i++)
			{
				if (res[i].apply)
					rl_local_write(algo[i], entries[i], &res[i], now);
			}
		}
		else
		{
			for (int i = 0; i < n; i++)
			{
				double		left = res[i].remaining;
				double		fresh = res[i].reset;

				if (res[i].ok)
				{
					/* Admitted, but nothing is consumed: the state as it is. */
					RlLocalResult peek;

					rl_local_algorithm(algo[i], entries[i], limit[i], window[i],
									   0, burst[i], now, carry[i], &peek);
					left = peek.remaining;
					fresh = peek.reset;
				}
				else
				{
					double		wait = Max(1, rl_local_ms(res[i].retry));

					if (wait > retry)
					{
						retry = wait;
						tightest = i + 1;
					}
				}
				left = Max(0, left);
				if (remaining < 0 || left < remaining)
					remaining = left;
				reset = Max(reset, rl_local_ms(fresh));
			}
		}
	}
	/* Entries reserved and not written go back, last first. */
	for (int i = n - 1; i >= 0; i--)
	{
		if (entries[i] != NULL && !entries[i]->valid)
		{
			rl_local_release(entries[i], hashes[i]);
			for (int k = 0; k < i; k++)
			{
				if (entries[k] == entries[i])
					entries[k] = NULL;
			}
		}
	}
	rl_local_unlock(parts, nparts);
	if (room != RL_ROOM_OK)
		return room;
	if (check->receipts != NULL)
	{
		for (int i = 0; i < n; i++)
			rl_local_receipt(&check->receipts[i], &res[i],
							 all_ok && !check_only && res[i].apply);
	}

	out->n = 5;
	out->v[0] = all_ok ? 1 : 0;
	out->v[1] = (int64) remaining;
	out->v[2] = all_ok ? 0 : (int64) retry;
	out->v[3] = (int64) reset;
	out->v[4] = tightest;
	return RL_ROOM_OK;
}

/*
 * The library must be preloaded: the table is made at server start.  Once
 * found, the table stays for the backend's life, so a check asks once
 * (this saves two calls into other files on every check).
 */
static void
rl_local_begin(void)
{
	static bool ready = false;

	if (likely(ready))
		return;
	rl_require_preload();
	if (!rl_local_ready())
		elog(ERROR, "the ratelimit local engine's shared memory is missing");
	ready = true;
}

/*
 * ratelimit.test_clock_ms in us, or 0 for the wall clock: the number the
 * Redis store writes out for a script (rl_clock_arg), without the text.
 */
static double
rl_local_test_clock(void)
{
	return rl_test_clock_ms > 0 ? rint(rl_test_clock_ms * 1000.0) : 0;
}

/* No room: the failure the policy gets with the check, counted. */
static RlFailure *
rl_local_full(RlLocalRoom why)
{
	RlFailure  *f = &rl_local_failure;

	rl_counters.failures++;
	f->reason = RL_FAILED_FULL;
	f->setting = rl_local_room_setting(why);
	f->log_full = why == RL_ROOM_NO_LOG;
	strlcpy(f->subject, f->setting, sizeof(f->subject));
	strlcpy(f->what, rl_local_room_detail(why), sizeof(f->what));
	f->retry_at = 0;
	f->events++;
	return f;
}

/* The store's check: each check answered at once, under its keys' locks. */
static void
rl_local_check(RlCheck *checks, int n, RlWaitWork work)
{
	double		pinned = rl_local_test_clock();

	rl_local_begin();
	for (int i = 0; i < n; i++)
	{
		RlCheck    *c = &checks[i];
		RlLocalReply r;
		RlLocalRoom room;

		c->answered = false;
		c->tightest = 0;
		if (c->rules)
			room = rl_local_rules(c, pinned, &r);
		else
		{
			const RlLimiter *l = &c->limiters[0];

			room = rl_local_allow_key(l->algorithm, c->keys[0],
									  strlen(c->keys[0]), (double) l->limit,
									  (double) l->window_us,
									  (double) c->costs[0],
									  (double) rl_capacity(l), l->carry,
									  pinned, &r, c->receipts);
		}
		if (room != RL_ROOM_OK)
		{
			c->failure = rl_local_full(room);
			continue;
		}
		c->answered = true;
		c->answer.known = true;
		c->answer.allowed = r.v[0] != 0;
		c->answer.remaining = r.v[1];
		c->answer.retry_after_ms = r.v[2];
		c->answer.reset_after_ms = r.v[3];
		if (r.n == 5)
			c->tightest = (int) r.v[4] - 1;
	}
}

/* rl_reset on the local store: the keys' entries are freed. */
static bool
rl_local_remove(char **keys, int n, bool *existed, RlFailure **failure)
{
	rl_local_begin();
	*existed = false;
	for (int i = 0; i < n; i++)
	{
		size_t		len = strlen(keys[i]);
		uint64		hash = rl_local_hash(keys[i], len);
		int			part = rl_local_partition(hash);
		RlLocalEntry *e;
		bool		full;

		rl_local_lock(&part, 1);
		e = rl_local_find(keys[i], len, hash, 0, false, &full, NULL, 0);
		if (e != NULL)
		{
			*existed |= e->valid;
			rl_local_release(e, hash);
		}
		rl_local_unlock(&part, 1);
	}
	return true;
}

/*
 * The store's refund: each refund given back under its key's lock
 * (rl_local_refund, as lua/refund.lua does it).  Nothing here can fail:
 * a key no longer in the table has nothing to give back.
 */
static RlFailure *
rl_local_refund_op(RlRefund *refunds, int n)
{
	double		pinned = rl_local_test_clock();

	rl_local_begin();
	for (int i = 0; i < n; i++)
	{
		RlRefund   *r = &refunds[i];
		const RlLimiter *l = &r->limiter;
		size_t		len = strlen(r->key);
		uint64		hash = rl_local_hash(r->key, len);
		int			part = rl_local_partition(hash);
		double		wall = pinned > 0 ? 0 : rl_local_wall_clock();
		RlLocalEntry *e;
		bool		full;
		double		now;

		rl_local_lock(&part, 1);
		now = rl_local_clock(&part, 1, pinned, wall);
		e = rl_local_find(r->key, len, hash, now, false, &full, NULL, 0);
		if (e != NULL && e->valid)
		{
			rl_local_refund(l->algorithm, e, (double) l->limit,
							(double) l->window_us, (double) rl_capacity(l),
							l->carry, (double) r->cost,
							(double) r->receipt.r1, (double) r->receipt.r2,
							now);
			/* A state given back to fresh leaves its entry. */
			if (!e->valid)
				rl_local_release(e, hash);
		}
		rl_local_unlock(&part, 1);
		r->done = true;
	}
	return NULL;
}

/* One table, one partition: every check of a statement is atomic here. */
static int
rl_local_partition_of(const char *key)
{
	return -1;
}

/*
 * rl_ping() on the local engine: no server to reach, the table is this
 * server's shared memory; one row says so.
 */
static int
rl_local_probe(RlProbeRow *rows, int max, RlProbeFailure *failure)
{
	rl_require_preload();
	if (max < 1)
		return 0;
	memset(&rows[0], 0, sizeof(RlProbeRow));
	rows[0].engine = "local";
	rows[0].mode = NULL;
	rows[0].rtt_ms = -1;
	return 1;
}

const RlStoreOps rl_local_store = {
	.name = "local",
	.init = rl_local_init,
	.check = rl_local_check,
	.remove = rl_local_remove,
	.partition = rl_local_partition_of,
	.status = NULL,
	.probe = rl_local_probe,
	.refund = rl_local_refund_op,
};
