/*-------------------------------------------------------------------------
 *
 * rl_engine.c
 *	  The engine: runs checks and applies the failure policy.
 *
 * Every check of the extension runs here: rl_allow, rl_peek, rl_allow_many,
 * rl_acquire and rl_postgrest_guard through rl_check_many; layered rules
 * and both triggers through rl_check_rules (a statement's keys across
 * cluster slots are sent by rl_trigger_slots.c, which takes their answers
 * from rl_take_answers here).  One call, from SQL to the node and back:
 *
 *	1. rl_allow (ratelimit.c) checks its arguments and calls rl_check_many.
 *	2. rl_check_many (here) picks the engine: under ratelimit.engine =
 *	   local, rl_check_many_local answers from this server's shared memory
 *	   (rl_local_*.c); else it builds one script call (RlScriptCall) per
 *	   key for Redis.  On either, a key the deny cache (rl_cache.c) holds
 *	   as denied is answered at once, with no check.
 *	3. rl_run_scripts (rl_scripts.c) sends them as FCALL or EVALSHA: to
 *	   the standalone server in one pipeline, or, in cluster mode, through
 *	   rl_run_cluster, which routes each call to its slot's master
 *	   (rl_cluster.c) and follows MOVED, ASK and TRYAGAIN.  Under
 *	   ratelimit.failure_mode = local the calls Redis left unanswered are
 *	   answered by the local engine there.
 *	4. rl_node_send and rl_node_receive / rl_nodes_receive (rl_roundtrip.c)
 *	   write the commands and wait for the replies on the latch, with the
 *	   timeouts; a failure is recorded there (rl_conn_failure), on the
 *	   node the call went to.
 *	5. rl_take_answers (here) turns each reply into an answer; a call with
 *	   no reply gets the failure policy's answer (rl_policy_answer_for,
 *	   rl_policy_answer: open, closed with the node's wait, or an ERROR),
 *	   counted in rl_status().
 *	6. rl_check_many counts allowed and denied, remembers a denial in the
 *	   deny cache, and under ratelimit.enforce = off (rl_apply_enforce)
 *	   lets a denied call through; rl_allow builds the rl_result row.
 *
 * Who does what on a failure: rl_conn.c keeps the link's bookkeeping
 * (rl_conn_failure and its kin: the node rests for retry_interval, its
 * link is dropped, rl_status().last_error is set, the WARNING is
 * rate-limited); this file decides what the caller is answered
 * meanwhile, and words the policy for that WARNING (rl_policy_words).
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_engine.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

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
 * The deny cache's answer for rkey, when it holds a denial that still
 * stands: counted as a cached denial here, so that every entry point
 * counts it alike.
 */
static bool
rl_cached_denial(const char *rkey, const RlLimiter *limiter, int64 cost,
				 RlAnswer *answer)
{
	if (!rl_cache_lookup(rkey, limiter, cost, answer))
		return false;
	rl_counters.cached++;
	rl_counters.denied++;
	rl_stats_denied(rkey, limiter->algorithm);
	return true;
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
		char	   *rkey = rl_redis_key(keys[i], keylens[i], limiter);

		if (rl_cached_denial(rkey, limiter, costs[i], &answers[i]))
		{
			/* answered by the deny cache */
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
		char	   *rkey = rl_redis_key(keys[i], keylens[i], limiter);
		RlScriptCall *call = &calls[m];

		if (rl_cached_denial(rkey, limiter, costs[i], &answers[i]))
			continue;
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
	if (n == 1 && rl_cached_denial(redis_keys[0], &limiters[0], costs[0], answer))
		return 0;

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

/* The policy half: answers from replies, and while there are none. */

/*
 * What the failure policy does with calls while Redis cannot be used, for
 * the WARNING: an operator reading the log must know whether calls are
 * being let through.
 */
const char *
rl_policy_words(void)
{
	if (!rl_enforce && rl_failure_mode != RL_FAIL_ERROR)
		return "calls are let through (ratelimit.enforce is off)";
	switch (rl_failure_mode)
	{
		case RL_FAIL_OPEN:
			return "calls are let through (ratelimit.failure_mode is \"open\")";
		case RL_FAIL_CLOSED:
			return "calls are denied (ratelimit.failure_mode is \"closed\")";
		case RL_FAIL_LOCAL:
			return "calls are answered by this server's local engine (ratelimit.failure_mode is \"local\")";
		default:
			return "calls raise an error (ratelimit.failure_mode is \"error\")";
	}
}

/*
 * The answer while Redis is unavailable, by ratelimit.failure_mode: open
 * admits, closed denies until the next attempt, error raises.
 */
void
rl_policy_answer(RlAnswer *answer)
{
	TimestampTz retry_at = rl_conn_current_retry_at();
	TimestampTz error_at;
	const char *error = rl_conn_last_error(&error_at);

	answer->known = false;
	answer->remaining = 0;
	answer->reset_after_ms = 0;
	switch (rl_failure_mode)
	{
		case RL_FAIL_OPEN:
			rl_counters.fail_open++;
			answer->allowed = true;
			answer->retry_after_ms = 0;
			break;
		case RL_FAIL_CLOSED:
		case RL_FAIL_LOCAL:		/* the local engine could not answer either */
			rl_counters.fail_closed++;
			answer->allowed = false;
			answer->retry_after_ms = 1;
			if (retry_at != 0)
				answer->retry_after_ms =
					Max(1, TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
														   retry_at));
			break;
		default:
			ereport(ERROR,
					(errcode(ERRCODE_CONNECTION_FAILURE),
					 errmsg("Redis server %s is unavailable", rl_conn_endpoint()),
					 errdetail_internal("%s", error != NULL ? error : ""),
					 errhint("ratelimit.failure_mode is \"error\"; set it to \"open\" or \"closed\" to answer without Redis.")));
	}
}

/*
 * The policy's answer for call i of the n of the last rl_run_scripts,
 * with the wait (closed mode) of the node that call went to.
 */
void
rl_policy_answer_for(int i, int n, RlAnswer *answer)
{
	RlNode	   *node = rl_scripts_call_node(i, n);

	if (node != NULL)
		rl_conn_set_current(node);
	rl_policy_answer(answer);
}

/* A script's reply {allowed, remaining, retry_after_ms, reset_after_ms}. */
static bool
rl_reply_answer(redisReply *reply, RlAnswer *answer)
{
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 4)
		return false;
	for (int i = 0; i < 4; i++)
	{
		if (reply->element[i]->type != REDIS_REPLY_INTEGER)
			return false;
	}
	answer->known = true;
	answer->allowed = reply->element[0]->integer != 0;
	answer->remaining = reply->element[1]->integer;
	answer->retry_after_ms = reply->element[2]->integer;
	answer->reset_after_ms = reply->element[3]->integer;
	return true;
}

/*
 * Turns n script replies into answers and frees them; a missing reply
 * (Redis refused that call as unavailable) gets the policy's answer, and a
 * reply of the wrong shape (a foreign script under our SHA, say) is an
 * ERROR, and the link is dropped: what comes next on it cannot be trusted.
 */
void
rl_take_answers(redisReply **replies, int n, RlAnswer *answers)
{
	bool		ok = true;

	for (int i = 0; i < n && ok; i++)
	{
		answers[i].known = false;
		if (replies[i] != NULL)
			ok = rl_reply_answer(replies[i], &answers[i]);
	}
	rl_free_replies(replies, n);
	if (!ok)
	{
		rl_conn_drop();
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("unexpected reply from a rate limiter script"),
				 errdetail("The connection to Redis was closed; the next call opens a new one.")));
	}
	/* Only now, with nothing left to free: under "error" this raises. */
	for (int i = 0; i < n; i++)
	{
		if (!answers[i].known)
			rl_policy_answer_for(i, n, &answers[i]);
	}
}
