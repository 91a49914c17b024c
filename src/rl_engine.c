/*-------------------------------------------------------------------------
 *
 * rl_engine.c
 *	  The engine: runs checks and applies the failure policy.
 *
 * One check of one or more keys against Redis (or the local engine), with
 * the deny cache in front and the failure policy behind.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_engine.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "rl_cache.h"
#include "rl_local.h"
#include "rl_scripts.h"
#include "rl_stats.h"

/*
 * Shadow mode (ratelimit.enforce off): the checks ran and were counted as
 * usual, denials included, but every caller is let through.  A denied
 * answer becomes an admitted one with nothing to wait for; remaining and
 * reset_after_ms stay Redis's, so they still tell how close the key is.
 */
void
rl_apply_enforce(RlAnswer *answers, int n)
{
	if (rl_enforce)
		return;
	for (int i = 0; i < n; i++)
	{
		if (!answers[i].allowed)
		{
			rl_counters.shadow_denied++;
			answers[i].allowed = true;
			answers[i].retry_after_ms = 0;
		}
	}
}

static void rl_check_many_once(const RlLimiter *limiter, char **keys,
							   int *keylens, const int64 *costs, int n,
							   RlAnswer *answers);

/*
 * Checks n keys against one limiter in a single round trip.  Keys the
 * deny cache answers (rl_cache.c) are left out of it; while Redis is
 * unavailable every other answer is the failure policy's.
 */
void
rl_check_many(const RlLimiter *limiter, char **keys, int *keylens,
			  const int64 *costs, int n, RlAnswer *answers)
{
	rl_check_many_once(limiter, keys, keylens, costs, n, answers);
	rl_apply_enforce(answers, n);
}

/*
 * rl_check_many on the local engine: each key answered at once, with
 * nothing built for Redis (no script call, no reply).
 */
static void
rl_check_many_local(const RlLimiter *limiter, char **keys, int *keylens,
					const int64 *costs, int n, RlAnswer *answers)
{
	/* The shared reset count is read only for a deny cache that is on. */
	uint64		epoch = rl_deny_cache ? rl_cache_epoch() : 0;

	rl_counters.calls += n;
	for (int i = 0; i < n; i++)
	{
		char	   *rkey = rl_redis_key(keys[i], keylens[i], limiter, false);

		if (rl_cache_lookup(rkey, limiter, costs[i], &answers[i]))
		{
			rl_counters.cached++;
			rl_counters.denied++;
			rl_stats_denied(rkey, limiter->algorithm);
		}
		else if (!rl_local_check(limiter, rkey, costs[i], &answers[i]))
			rl_policy_answer(&answers[i]);
		else if (answers[i].allowed)
			rl_counters.allowed++;
		else
		{
			rl_counters.denied++;
			rl_stats_denied(rkey, limiter->algorithm);
			rl_cache_remember(rkey, limiter, costs[i], &answers[i], epoch);
		}
		pfree(rkey);
	}
}

static void
rl_check_many_once(const RlLimiter *limiter, char **keys, int *keylens,
				   const int64 *costs, int n, RlAnswer *answers)
{
	RlScriptCall *calls;
	redisReply **replies;
	RlAnswer   *got;
	int		   *slot;
	char		limit[24];
	char		window[24];
	char		burst[24];
	const char *clock;
	uint64		epoch;
	int			m = 0;

	if (rl_engine == RL_ENGINE_LOCAL)
	{
		rl_check_many_local(limiter, keys, keylens, costs, n, answers);
		return;
	}
	calls = palloc(sizeof(RlScriptCall) * n);
	replies = palloc0(sizeof(redisReply *) * n);
	got = palloc(sizeof(RlAnswer) * n);
	slot = palloc(sizeof(int) * n);
	clock = rl_clock_arg();
	epoch = rl_cache_epoch();
	snprintf(limit, sizeof(limit), INT64_FORMAT, limiter->limit);
	snprintf(window, sizeof(window), INT64_FORMAT, limiter->window_us);
	snprintf(burst, sizeof(burst), INT64_FORMAT, limiter->burst);
	rl_counters.calls += n;
	for (int i = 0; i < n; i++)
	{
		char	   *rkey = rl_redis_key(keys[i], keylens[i], limiter, false);
		RlScriptCall *call = &calls[m];

		if (rl_cache_lookup(rkey, limiter, costs[i], &answers[i]))
		{
			rl_counters.cached++;
			rl_counters.denied++;
			rl_stats_denied(rkey, limiter->algorithm);
			continue;
		}
		/* A burst is a sixth argument, sent only when one is set. */
		rl_script_call_init(call, limiter->algorithm, 1,
							limiter->burst > 0 ? 6 : 5);
		rl_script_call_set(call, 0, rkey);
		rl_script_call_set(call, 1, limit);
		rl_script_call_set(call, 2, window);
		rl_script_call_set(call, 3, psprintf(INT64_FORMAT, costs[i]));
		rl_script_call_set(call, 4, clock);
		if (limiter->burst > 0)
			rl_script_call_set(call, 5, burst);
		slot[m++] = i;
	}
	if (m == 0)
		return;

	if (!rl_run_scripts(calls, m, replies))
	{
		for (int j = 0; j < m; j++)
			rl_policy_answer_for(j, m, &answers[slot[j]]);
		return;
	}
	rl_take_answers(replies, m, got);
	for (int j = 0; j < m; j++)
	{
		int			i = slot[j];

		answers[i] = got[j];
		if (!got[j].known)
			continue;			/* the policy's answer, counted there */
		if (got[j].allowed)
			rl_counters.allowed++;
		else
		{
			rl_counters.denied++;
			rl_stats_denied(calls[j].params[0], limiter->algorithm);
			rl_cache_remember(calls[j].params[0], limiter, costs[i], &got[j],
							  epoch);
		}
	}
}
