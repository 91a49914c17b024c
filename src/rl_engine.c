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

/*
 * Runs the layered script over n rules, each a Redis key, a limiter and a
 * cost, in one round trip.  Fills *answer (the failure policy's while
 * Redis is unavailable) and returns the 0-based index of the most
 * restrictive rule, or -1 when Redis did not answer.  A single rule (a
 * row trigger's) is answered from the deny cache like rl_allow.
 */
static int	rl_check_rules_once(char **redis_keys, const RlLimiter *limiters,
								const int64 *costs, int n, RlAnswer *answer);

int
rl_check_rules(char **redis_keys, const RlLimiter *limiters,
			   const int64 *costs, int n, RlAnswer *answer)
{
	int			tightest = rl_check_rules_once(redis_keys, limiters, costs, n,
											   answer);

	rl_apply_enforce(answer, 1);
	return tightest;
}

static int
rl_check_rules_once(char **redis_keys, const RlLimiter *limiters,
					const int64 *costs, int n, RlAnswer *answer)
{
	RlScriptCall call;
	redisReply *reply = NULL;
	int			p = 0;
	int			tightest = 0;
	uint64		epoch = rl_cache_epoch();
	char	   *limit = NULL;
	char	   *window = NULL;
	char	   *cost = NULL;
	char	   *burst = NULL;
	bool		uniform = n > 1;

	rl_counters.calls++;
	if (n == 1 && rl_cache_lookup(redis_keys[0], &limiters[0], costs[0], answer))
	{
		rl_counters.cached++;
		rl_counters.denied++;
		rl_stats_denied(redis_keys[0], limiters[0].algorithm);
		return 0;
	}

	for (int i = 1; i < n && uniform; i++)
		uniform = limiters[i].algorithm == limiters[0].algorithm &&
			limiters[i].limit == limiters[0].limit &&
			limiters[i].window_us == limiters[0].window_us &&
			limiters[i].burst == limiters[0].burst;

	/* Each rule's capacity (its burst, or its limit) goes with it. */
	rl_script_call_init(&call, RL_SCRIPT_LAYERED, n,
						uniform ? 2 * n + 6 : 6 * n + 1);
	for (int i = 0; i < n; i++)
		rl_script_call_set(&call, p++, redis_keys[i]);
	rl_script_call_set(&call, p++, rl_clock_arg());
	if (uniform)
	{
		/* One limiter for every key (a statement): sent once. */
		rl_script_call_set(&call, p++, "=");
		rl_script_call_set(&call, p++, rl_algorithm_name(limiters[0].algorithm));
		rl_script_call_set(&call, p++, psprintf(INT64_FORMAT, limiters[0].limit));
		rl_script_call_set(&call, p++, psprintf(INT64_FORMAT, limiters[0].window_us));
		rl_script_call_set(&call, p++, psprintf(INT64_FORMAT, rl_capacity(&limiters[0])));
	}
	for (int i = 0; i < n; i++)
	{
		/* A statement's costs repeat: format each run of them once. */
		if (i == 0 || costs[i] != costs[i - 1])
			cost = psprintf(INT64_FORMAT, costs[i]);
		if (!uniform)
		{
			if (i == 0 || limiters[i].limit != limiters[i - 1].limit)
				limit = psprintf(INT64_FORMAT, limiters[i].limit);
			if (i == 0 || limiters[i].window_us != limiters[i - 1].window_us)
				window = psprintf(INT64_FORMAT, limiters[i].window_us);
			if (i == 0 || rl_capacity(&limiters[i]) != rl_capacity(&limiters[i - 1]))
				burst = psprintf(INT64_FORMAT, rl_capacity(&limiters[i]));
			rl_script_call_set(&call, p++, rl_algorithm_name(limiters[i].algorithm));
			rl_script_call_set(&call, p++, limit);
			rl_script_call_set(&call, p++, window);
		}
		rl_script_call_set(&call, p++, cost);
		if (!uniform)
			rl_script_call_set(&call, p++, burst);
	}

	if (!rl_run_scripts(&call, 1, &reply))
	{
		rl_policy_answer(answer);
		return -1;
	}

	/* The fifth element names the rule; rl_take_answers checks the rest. */
	if (reply->type == REDIS_REPLY_ARRAY && reply->elements >= 5 &&
		reply->element[4]->type == REDIS_REPLY_INTEGER &&
		reply->element[4]->integer >= 1 && reply->element[4]->integer <= n)
		tightest = (int) reply->element[4]->integer - 1;
	else
	{
		rl_free_replies(&reply, 1);
		rl_conn_drop();
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("unexpected reply from a rate limiter script"),
				 errdetail("The connection to Redis was closed; the next call opens a new one.")));
	}
	rl_take_answers(&reply, 1, answer);
	if (answer->allowed)
		rl_counters.allowed++;
	else
	{
		rl_counters.denied++;
		rl_stats_denied(redis_keys[tightest], limiters[tightest].algorithm);
		if (n == 1)
			rl_cache_remember(redis_keys[0], &limiters[0], costs[0], answer,
							  epoch);
	}
	return tightest;
}
