/*-------------------------------------------------------------------------
 *
 * rl_redis.c
 *	  The Redis store: the engine's checks as script calls, their replies
 *	  as answers.
 *
 * The operations of rl_store.h for Redis.  A check of one limiter is one
 * call of its algorithm's script (lua/<algorithm>.lua); rules checked
 * together are one call of lua/layered.lua, in its uniform form ('=', or
 * '?' to check only) when every rule has the same limiter.  rl_scripts.c
 * sends the calls (FCALL or EVALSHA, pipelined, routed per hash slot in a
 * cluster); here each reply becomes an answer, and a call Redis did not
 * answer is left unanswered with the failure of the node it went to
 * (rl_conn.c keeps it), for the failure policy.
 *
 * A reply of the wrong shape (a foreign script under our SHA, a peer out
 * of step) is an ERROR, raised here only, and the link is dropped: what
 * comes next on it cannot be trusted.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_redis.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "rl_args.h"
#include "rl_cluster.h"
#include "rl_scripts.h"

/* Numbers of a call, formatted once per limiter and reused. */
typedef struct RlRedisNumbers
{
	const RlLimiter *limiter;
	char		limit[24];
	char		window[24];
	char		burst[24];
	char		capacity[24];
} RlRedisNumbers;

static void
rl_redis_numbers(RlRedisNumbers *nums, const RlLimiter *limiter)
{
	if (nums->limiter == limiter)
		return;
	nums->limiter = limiter;
	snprintf(nums->limit, sizeof(nums->limit), INT64_FORMAT, limiter->limit);
	snprintf(nums->window, sizeof(nums->window), INT64_FORMAT,
			 limiter->window_us);
	snprintf(nums->burst, sizeof(nums->burst), INT64_FORMAT, limiter->burst);
	snprintf(nums->capacity, sizeof(nums->capacity), INT64_FORMAT,
			 rl_capacity(limiter));
}

/*
 * A check of one limiter: its algorithm's script, with key, limit,
 * window, cost and clock, and the burst as a sixth argument when one is
 * set.
 */
static void
rl_redis_single_call(RlScriptCall *call, const RlCheck *check,
					 RlRedisNumbers *nums, const char *clock)
{
	const RlLimiter *limiter = &check->limiters[0];

	rl_redis_numbers(nums, limiter);
	rl_script_call_init(call, limiter->algorithm, 1,
						limiter->burst > 0 ? 6 : 5);
	rl_script_call_set(call, 0, check->keys[0]);
	rl_script_call_set(call, 1, nums->limit);
	rl_script_call_set(call, 2, nums->window);
	rl_script_call_set(call, 3, psprintf(INT64_FORMAT, check->costs[0]));
	rl_script_call_set(call, 4, clock);
	if (limiter->burst > 0)
		rl_script_call_set(call, 5, nums->burst);
}

/*
 * Rules checked together: layered.lua with keys, clock, then either the
 * uniform marker ('=', or '?' to check only), the one limiter (algorithm,
 * limit, window, capacity) and each cost; or each rule's algorithm,
 * limit, window, cost and capacity (its burst, or its limit).
 */
static void
rl_redis_rules_call(RlScriptCall *call, const RlCheck *check,
					const char *clock)
{
	int			n = check->nrules;
	int			p = 0;
	char	   *cost = NULL;

	rl_script_call_init(call, RL_SCRIPT_LAYERED, n,
						check->uniform ? 2 * n + 6 : 6 * n + 1);
	for (int i = 0; i < n; i++)
		rl_script_call_set(call, p++, check->keys[i]);
	rl_script_call_set(call, p++, clock);
	if (check->uniform)
	{
		const RlLimiter *l = &check->limiters[0];

		rl_script_call_set(call, p++, check->check_only ? "?" : "=");
		rl_script_call_set(call, p++, rl_algorithm_name(l->algorithm));
		rl_script_call_set(call, p++, psprintf(INT64_FORMAT, l->limit));
		rl_script_call_set(call, p++, psprintf(INT64_FORMAT, l->window_us));
		rl_script_call_set(call, p++, psprintf(INT64_FORMAT, rl_capacity(l)));
		for (int i = 0; i < n; i++)
		{
			/* A statement's costs repeat: format each run of them once. */
			if (i == 0 || check->costs[i] != check->costs[i - 1])
				cost = psprintf(INT64_FORMAT, check->costs[i]);
			rl_script_call_set(call, p++, cost);
		}
		return;
	}
	for (int i = 0; i < n; i++)
	{
		const RlLimiter *l = &check->limiters[i];

		rl_script_call_set(call, p++, rl_algorithm_name(l->algorithm));
		rl_script_call_set(call, p++, psprintf(INT64_FORMAT, l->limit));
		rl_script_call_set(call, p++, psprintf(INT64_FORMAT, l->window_us));
		rl_script_call_set(call, p++, psprintf(INT64_FORMAT, check->costs[i]));
		rl_script_call_set(call, p++, psprintf(INT64_FORMAT, rl_capacity(l)));
	}
}

/*
 * A script's reply {allowed, remaining, retry_after_ms, reset_after_ms}
 * and, for rules, the 1-based rule that decided.  False for any other
 * shape.
 */
static bool
rl_redis_answer(const redisReply *reply, RlCheck *check)
{
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 4)
		return false;
	for (int i = 0; i < 4; i++)
	{
		if (reply->element[i]->type != REDIS_REPLY_INTEGER)
			return false;
	}
	check->tightest = 0;
	if (check->rules)
	{
		if (reply->elements < 5 ||
			reply->element[4]->type != REDIS_REPLY_INTEGER ||
			reply->element[4]->integer < 1 ||
			reply->element[4]->integer > check->nrules)
			return false;
		check->tightest = (int) reply->element[4]->integer - 1;
	}
	check->answer.known = true;
	check->answer.allowed = reply->element[0]->integer != 0;
	check->answer.remaining = reply->element[1]->integer;
	check->answer.retry_after_ms = reply->element[2]->integer;
	check->answer.reset_after_ms = reply->element[3]->integer;
	check->answered = true;
	return true;
}

/*
 * The store's check: every check one script call, sent together.  A call
 * with no reply is left unanswered, with the failure of its node.
 */
static void
rl_redis_check(RlCheck *checks, int n, RlWaitWork work)
{
	RlScriptCall *calls = palloc(sizeof(RlScriptCall) * n);
	redisReply **replies = palloc0(sizeof(redisReply *) * n);
	RlRedisNumbers nums = {0};
	const char *clock = rl_clock_arg();
	bool		ran;
	bool		ok = true;

	for (int i = 0; i < n; i++)
	{
		checks[i].answered = false;
		if (checks[i].rules)
			rl_redis_rules_call(&calls[i], &checks[i], clock);
		else
			rl_redis_single_call(&calls[i], &checks[i], &nums, clock);
	}

	rl_conn_set_wait_work(work);
	PG_TRY();
	{
		ran = rl_run_scripts(calls, n, replies);
	}
	PG_FINALLY();
	{
		rl_conn_set_wait_work(NULL);
	}
	PG_END_TRY();

	if (ran)
	{
		for (int i = 0; i < n && ok; i++)
		{
			if (replies[i] != NULL)
				ok = rl_redis_answer(replies[i], &checks[i]);
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
	}

	/* What Redis did not answer: the failure of the node each call met. */
	for (int i = 0; i < n; i++)
	{
		RlNode	   *node;

		if (checks[i].answered)
			continue;
		node = ran ? rl_scripts_call_node(i, n) : NULL;
		if (node != NULL)
			rl_conn_set_current(node);
		checks[i].failure = rl_conn_current_failure();
	}
}

/* DEL of the keys: whether any existed; false when Redis is unavailable. */
static bool
rl_redis_remove(char **keys, int n, bool *existed, RlFailure **failure)
{
	const char **argv = palloc(sizeof(char *) * (n + 1));
	size_t	   *argvlen = palloc(sizeof(size_t) * (n + 1));
	RlCommand	cmd = {n + 1, argv, argvlen};
	redisReply *reply;

	argv[0] = "DEL";
	argvlen[0] = 3;
	for (int i = 0; i < n; i++)
	{
		argv[i + 1] = keys[i];
		argvlen[i + 1] = strlen(keys[i]);
	}
	if (!rl_run_command(&cmd, &reply))
	{
		*failure = rl_conn_current_failure();
		return false;
	}
	if (reply->type != REDIS_REPLY_INTEGER)
	{
		/* DEL answers a count; anything else is a peer out of step. */
		freeReplyObject(reply);
		rl_conn_drop();
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("unexpected reply from Redis to DEL"),
				 errdetail("The connection to Redis was closed; the next call opens a new one.")));
	}
	*existed = reply->integer > 0;
	freeReplyObject(reply);
	return true;
}

/* A key's hash slot in a cluster; one partition otherwise. */
static int
rl_redis_partition(const char *key)
{
	if (rl_redis_mode != RL_MODE_CLUSTER)
		return -1;
	return rl_key_slot(key, strlen(key));
}

static void
rl_redis_status(RlStoreStatus *status)
{
	status->endpoint = rl_conn_status_endpoint();
	status->connected = rl_conn_connected();
	status->server = rl_conn_server_version();
	status->last_error = rl_conn_last_error(&status->last_error_at);
}

const RlStoreOps rl_redis_store = {
	.name = "redis",
	.init = NULL,
	.check = rl_redis_check,
	.remove = rl_redis_remove,
	.partition = rl_redis_partition,
	.status = rl_redis_status,
};
