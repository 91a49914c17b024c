/*-------------------------------------------------------------------------
 *
 * rl_local_run.c
 *	  Script calls and commands answered by the local engine.
 *
 * Every entry point builds the same script calls for both stores (keys
 * and arguments as the Lua scripts take them, see rl_scripts.c) and reads
 * the same replies.  Here a call is run against the shared table instead
 * of Redis: the single-limiter scripts (allow.lua) and the layered one
 * (layered.lua) are mirrored, with the algorithms of rl_local_algo.c, and
 * the reply is built as hiredis would have built Redis's, so the callers
 * cannot tell the stores apart.  A call's keys are locked together (their
 * partitions in ascending order), so it is atomic as a script is.
 *
 * A call that needs a new entry when the table is full, or an admitted
 * sliding-log call when the pool of log members is, gets no reply (the
 * failure policy answers it, with a WARNING); under failure_mode "error"
 * it is an ERROR.  Nothing here touches WAL or takes a transaction id,
 * so the engine works on hot standbys and in READ ONLY transactions.
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

/* What one call answered: the script's reply, as numbers. */
typedef struct RlLocalReply
{
	int			n;				/* 4, or 5 with the layered rule index */
	int64		v[5];
} RlLocalReply;

/* A reply array of integers, allocated as hiredis allocates its own. */
static redisReply *
rl_local_reply(const RlLocalReply *r)
{
	redisReply *reply = calloc(1, sizeof(redisReply));
	bool		ok = reply != NULL;

	if (ok)
	{
		reply->type = REDIS_REPLY_ARRAY;
		reply->element = calloc(r->n, sizeof(redisReply *));
		ok = reply->element != NULL;
		if (ok)
			reply->elements = r->n;
		for (int i = 0; ok && i < r->n; i++)
		{
			redisReply *e = calloc(1, sizeof(redisReply));

			ok = e != NULL;
			if (ok)
			{
				e->type = REDIS_REPLY_INTEGER;
				e->integer = r->v[i];
				reply->element[i] = e;
			}
		}
	}
	if (!ok)
	{
		if (reply != NULL)
			freeReplyObject(reply);
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	}
	return reply;
}

/*
 * A number argument as Lua's tonumber reads it.  The callers write whole
 * numbers below 2^53, read here digit by digit (exact, and far cheaper
 * than strtod); anything else goes to strtod.
 */
static double
rl_local_num(const char *text)
{
	int64		v = 0;
	const char *p = text;

	if (*p < '0' || *p > '9')
		return strtod(text, NULL);
	for (; *p >= '0' && *p <= '9' && p - text < 16; p++)
		v = v * 10 + (*p - '0');
	if (*p != '\0')
		return strtod(text, NULL);
	return (double) v;
}

static int
rl_local_algorithm_of(const char *name)
{
	for (int a = 0; a < RL_NUM_ALGORITHMS; a++)
	{
		if (strcmp(name, rl_algorithm_name((RlAlgorithm) a)) == 0)
			return a;
	}
	elog(ERROR, "unknown rate limiting algorithm \"%s\"", name);
	return -1;					/* keep compiler quiet */
}

/*
 * Room for what an admitted call writes: a sliding log's next member.
 * Taken after the algorithm has run and before anything is written, so
 * a denial needs no room and a write cannot fail half-way.
 */
static bool
rl_local_room(int algorithm, RlLocalEntry *e, const RlLocalResult *res,
			  double now, int need, const RlLocalHeld *held)
{
	return algorithm != RL_SLIDING_LOG || !res->apply ||
		rl_local_log_room(e, now, need, held);
}

/*
 * allow.lua: one key, one algorithm, at the pinned clock (0: the wall
 * clock).  RL_ROOM_OK, or why there was no room (nothing was changed
 * then).
 */
static RlLocalRoom
rl_local_allow_key(int algorithm, const char *key, size_t len, double limit,
				   double window, double cost, double burst, double pinned,
				   RlLocalReply *out)
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
	rl_local_algorithm(algorithm, e, limit, window, cost, burst, now, &res);
	out->n = 4;
	if (!res.ok && cost > 0)
	{
		out->v[0] = 0;
		out->v[1] = (int64) Max(0, res.remaining);
		out->v[2] = (int64) Max(1, (res.retry <= 0 ? 0 : ceil(res.retry / 1000)));
		out->v[3] = (int64) (res.reset <= 0 ? 0 : ceil(res.reset / 1000));
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
	}
	if (e != NULL && !e->valid)
		rl_local_release(e, hash);
	rl_local_unlock(&part, 1);
	return room;
}

/* allow.lua's call: key, limit, window, cost, clock[, burst]. */
static RlLocalRoom
rl_local_allow(const RlScriptCall *call, RlLocalReply *out)
{
	double		limit = rl_local_num(call->params[1]);

	return rl_local_allow_key(call->script, call->params[0], call->paramlen[0],
							  limit,
							  rl_local_num(call->params[2]),
							  rl_local_num(call->params[3]),
							  call->nparams > 5 ? rl_local_num(call->params[5]) : limit,
							  rl_local_pinned(call->params[4]), out);
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
 * why there was no room (nothing was changed then).  With the marker '?'
 * (the check round of a statement over many hash slots) the rules are only
 * checked, as the script does: the reply is the one '=' would give, and
 * nothing is written or reserved, so a check never needs room.
 */
static RlLocalRoom
rl_local_layered(const RlScriptCall *call, RlLocalReply *out)
{
	int			n = call->nkeys;
	const char *const *argv = call->params + n;
	bool		check_only = strcmp(argv[1], "?") == 0;
	bool		uniform = check_only || strcmp(argv[1], "=") == 0;
	double		pinned = rl_local_pinned(argv[0]);
	double		wall = pinned > 0 ? 0 : rl_local_wall_clock();
	double		now;
	double	   *burst = palloc(sizeof(double) * n);
	uint64	   *hashes = palloc(sizeof(uint64) * n);
	int		   *algo = palloc(sizeof(int) * n);
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
		hashes[i] = rl_local_hash(call->params[i], call->paramlen[i]);
		if (uniform)
		{
			algo[i] = i == 0 ? rl_local_algorithm_of(argv[2]) : algo[0];
			limit[i] = i == 0 ? rl_local_num(argv[3]) : limit[0];
			window[i] = i == 0 ? rl_local_num(argv[4]) : window[0];
			burst[i] = i == 0 ? rl_local_num(argv[5]) : burst[0];
			cost[i] = rl_local_num(argv[6 + i]);
		}
		else
		{
			int			base = 5 * i + 1;

			algo[i] = rl_local_algorithm_of(argv[base]);
			limit[i] = rl_local_num(argv[base + 1]);
			window[i] = rl_local_num(argv[base + 2]);
			cost[i] = rl_local_num(argv[base + 3]);
			burst[i] = rl_local_num(argv[base + 4]);
		}
	}
	nparts = rl_local_parts(hashes, n, parts);

	rl_local_lock(parts, nparts);
	now = rl_local_clock(parts, nparts, pinned, wall);
	/* The entries found so far are kept from the reclaim of a full one. */
	for (int i = 0; i < n && !full; i++)
		entries[i] = rl_local_find(call->params[i], call->paramlen[i],
								   hashes[i], now, cost[i] > 0 && !check_only,
								   &full, entries, i);
	if (full)
		room = RL_ROOM_NO_ENTRY;
	else
	{
		for (int i = 0; i < n; i++)
		{
			rl_local_algorithm(algo[i], entries[i], limit[i], window[i],
							   cost[i], burst[i], now, &res[i]);
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
									   0, burst[i], now, &peek);
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

	out->n = 5;
	out->v[0] = all_ok ? 1 : 0;
	out->v[1] = (int64) remaining;
	out->v[2] = all_ok ? 0 : (int64) retry;
	out->v[3] = (int64) reset;
	out->v[4] = tightest;
	return RL_ROOM_OK;
}

/*
 * The table full: an ERROR under failure_mode "error", else the WARNING
 * (the caller then gives the policy's answer).
 */
static void
rl_local_full(RlLocalRoom why)
{
	if (rl_failure_mode == RL_FAIL_ERROR)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("%s is full", rl_local_room_setting(why)),
				 errdetail_internal("%s", rl_local_room_detail(why)),
				 errhint("Raise %s (a restart is needed).",
						 rl_local_room_setting(why))));
	rl_local_full_warning(why);
}

/*
 * One script call: its reply, or NULL when the table is full (the policy
 * answers it; under failure_mode "error" that is an ERROR here).
 */
static redisReply *
rl_local_call(const RlScriptCall *call)
{
	RlLocalReply r;
	RlLocalRoom room;

	if (call->script == RL_SCRIPT_LAYERED)
		room = rl_local_layered(call, &r);
	else
		room = rl_local_allow(call, &r);
	if (room == RL_ROOM_OK)
		return rl_local_reply(&r);
	rl_local_full(room);
	return NULL;
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
 * ratelimit.test_clock_ms in us, or 0 for the wall clock: the number
 * rl_clock_arg writes out for a script call and rl_local_pinned reads back
 * (a whole number, so the same double), without the text.
 */
static double
rl_local_test_clock(void)
{
	return rl_test_clock_ms > 0 ? rint(rl_test_clock_ms * 1000.0) : 0;
}

/*
 * Runs n script calls on the local engine (ratelimit.engine = local):
 * as rl_run_scripts, replies[i] is the reply or NULL for the policy's
 * answer; false when none has a reply.
 */
bool
rl_local_run(RlScriptCall *calls, int n, redisReply **replies)
{
	bool		any = false;

	rl_local_begin();
	for (int i = 0; i < n; i++)
		replies[i] = NULL;
	PG_TRY();
	{
		for (int i = 0; i < n; i++)
		{
			replies[i] = rl_local_call(&calls[i]);
			any |= replies[i] != NULL;
		}
	}
	PG_CATCH();
	{
		rl_free_replies(replies, n);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return any;
}

/*
 * One check on the local engine for rl_check_many: what running its
 * allow.lua call would answer (the same code), without writing the call
 * out and building a reply, which is most of a check's cost in a batch.
 * False when the table is full (the caller gives the policy's answer).
 */
bool
rl_local_check(const RlLimiter *limiter, const char *rkey, int64 cost,
			   RlAnswer *answer)
{
	RlLocalReply r;
	RlLocalRoom room;

	rl_local_begin();
	room = rl_local_allow_key(limiter->algorithm, rkey, strlen(rkey),
							  (double) limiter->limit,
							  (double) limiter->window_us, (double) cost,
							  (double) rl_capacity(limiter),
							  rl_local_test_clock(), &r);
	if (room != RL_ROOM_OK)
	{
		rl_local_full(room);
		return false;
	}
	answer->known = true;
	answer->allowed = r.v[0] != 0;
	answer->remaining = r.v[1];
	answer->retry_after_ms = r.v[2];
	answer->reset_after_ms = r.v[3];
	return true;
}

/*
 * ratelimit.failure_mode = local: the calls Redis did not answer
 * (replies[i] NULL) are answered by this server's engine instead.
 */
void
rl_local_failover(RlScriptCall *calls, int n, redisReply **replies)
{
	rl_local_begin();
	PG_TRY();
	{
		for (int i = 0; i < n; i++)
		{
			if (replies[i] != NULL)
				continue;
			replies[i] = rl_local_call(&calls[i]);
			if (replies[i] != NULL)
				rl_counters.fail_local++;
		}
	}
	PG_CATCH();
	{
		rl_free_replies(replies, n);
		PG_RE_THROW();
	}
	PG_END_TRY();
}

/*
 * rl_reset's DEL on the local engine: the keys' entries are freed; the
 * reply is DEL's, the number of keys that existed.
 */
bool
rl_local_command(RlCommand *cmd, redisReply **reply)
{
	int64		deleted = 0;

	rl_local_begin();
	Assert(cmd->argc >= 1 && strcmp(cmd->argv[0], "DEL") == 0);
	for (int i = 1; i < cmd->argc; i++)
	{
		uint64		hash = rl_local_hash(cmd->argv[i], cmd->argvlen[i]);
		int			part = rl_local_partition(hash);
		RlLocalEntry *e;
		bool		full;

		rl_local_lock(&part, 1);
		e = rl_local_find(cmd->argv[i], cmd->argvlen[i], hash, 0, false, &full,
						  NULL, 0);
		if (e != NULL)
		{
			deleted += e->valid;
			rl_local_release(e, hash);
		}
		rl_local_unlock(&part, 1);
	}
	*reply = calloc(1, sizeof(redisReply));
	if (*reply == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	(*reply)->type = REDIS_REPLY_INTEGER;
	(*reply)->integer = deleted;
	return true;
}
