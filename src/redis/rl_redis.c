/*-------------------------------------------------------------------------
 *
 * rl_redis.c
 *	  The Redis store: the engine's checks as script calls, their replies
 *	  as answers.
 *
 * The operations of rl_store.h for Redis.  A check of one limiter is one
 * call of its algorithm's script (lua/<algorithm>.lua); rules checked
 * together are one call of lua/layered.lua, in its uniform form ('=', or
 * '?' to check only) when every rule has the same limiter.  A batch's
 * checks of one limiter whose keys share a node (standalone: all of them;
 * a cluster: those of one hash slot) go RL_BATCH_KEYS to one call of
 * layered.lua's '*' form, each key its own check: a call costs Redis and
 * this backend far more than a key does.  rl_scripts.c
 * sends the calls (FCALL or EVALSHA, pipelined, routed per hash slot in a
 * cluster); here each reply becomes an answer, and a call Redis did not
 * answer is left unanswered with the failure of the node it went to
 * (rl_node.c keeps it), for the failure policy.
 *
 * A reply of the wrong shape (a foreign script under our SHA, a peer out
 * of step) is an ERROR, raised here only, and the link is dropped: what
 * comes next on it cannot be trusted.
 *
 * In redis/'s order (test/layers.sh's ORDER; rl_conn.c's banner) this
 * file is the top: nothing in redis/ calls it.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_redis.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"

#include "rl_args.h"
#include "rl_cluster.h"
#include "rl_scripts.h"

/*
 * One script call: checks idx[first..first+n-1]; many: the '*' form;
 * receipts: the script returns them (a refund may follow).
 */
typedef struct RlRedisCall
{
	int			first;
	int			n;
	bool		many;
	bool		receipts;
} RlRedisCall;

/*
 * A number as a script's argument, in memory of the call's.  pg_lltoa,
 * not a printf: this runs several times for every check.
 */
static char *
rl_redis_int(int64 value)
{
	char	   *text = palloc(MAXINT8LEN + 1);

	pg_lltoa(value, text);
	return text;
}

/* Numbers of a call, formatted once per limiter and reused. */
typedef struct RlRedisNumbers
{
	const RlLimiter *limiter;
	char		limit[MAXINT8LEN + 1];
	char		window[MAXINT8LEN + 1];
	char		capacity[MAXINT8LEN + 1];
} RlRedisNumbers;

static void
rl_redis_numbers(RlRedisNumbers *nums, const RlLimiter *limiter)
{
	if (nums->limiter == limiter)
		return;
	nums->limiter = limiter;
	pg_lltoa(limiter->limit, nums->limit);
	pg_lltoa(limiter->window_us, nums->window);
	pg_lltoa(rl_capacity(limiter), nums->capacity);
}

/*
 * A check of one limiter: its algorithm's script, with key, limit,
 * window, cost and clock, and the capacity as a sixth argument when a
 * burst is set.  A named policy's limiter (carry) and a check that keeps
 * its receipt send the capacity always, and the flags after it: "c",
 * "r" or "cr" (lua/allow.lua).  The parameter forms with no refund send
 * what 0.4.0 sent.
 */
static void
rl_redis_single_call(RlScriptCall *call, const RlCheck *check,
					 RlRedisNumbers *nums, const char *clock)
{
	const RlLimiter *limiter = &check->limiters[0];
	bool		receipt = check->receipts != NULL;

	rl_redis_numbers(nums, limiter);
	rl_script_call_init(call, limiter->algorithm, 1,
						limiter->carry || receipt ? 7 :
						limiter->burst > 0 ? 6 : 5);
	rl_script_call_set(call, 0, check->keys[0]);
	rl_script_call_set(call, 1, nums->limit);
	rl_script_call_set(call, 2, nums->window);
	rl_script_call_set(call, 3, rl_redis_int(check->costs[0]));
	rl_script_call_set(call, 4, clock);
	if (limiter->carry || receipt)
	{
		rl_script_call_set(call, 5, nums->capacity);
		rl_script_call_set(call, 6, !receipt ? "c" :
						   limiter->carry ? "cr" : "r");
	}
	else if (limiter->burst > 0)
		rl_script_call_set(call, 5, nums->capacity);
}

/*
 * The algorithm's name as lua/layered.lua reads it: followed by '!' for a
 * named policy's limiter, whose state is carried over a change of its
 * parameters.
 */
static const char *
rl_redis_algorithm_arg(const RlLimiter *l)
{
	if (!l->carry)
		return rl_algorithm_name(l->algorithm);
	return psprintf("%s!", rl_algorithm_name(l->algorithm));
}

/*
 * Rules checked together: layered.lua with keys, clock, then either the
 * uniform mark ('=', or '?' to check only), the one limiter (algorithm,
 * limit, window, capacity) and each cost; or the mark '+' and each rule's
 * algorithm, limit, window, cost and capacity (its burst, or its limit).
 * The mark is followed by 'r' when the check keeps its receipts.  An
 * algorithm is sent as rl_redis_algorithm_arg names it.
 */
static void
rl_redis_rules_call(RlScriptCall *call, const RlCheck *check,
					const char *clock)
{
	int			n = check->nrules;
	int			p = 0;
	char	   *cost = NULL;

	bool		receipts = check->receipts != NULL && !check->check_only;

	rl_script_call_init(call, RL_SCRIPT_LAYERED, n,
						check->uniform ? 2 * n + 6 : 6 * n + 2);
	for (int i = 0; i < n; i++)
		rl_script_call_set(call, p++, check->keys[i]);
	rl_script_call_set(call, p++, clock);
	if (check->uniform)
	{
		const RlLimiter *l = &check->limiters[0];

		rl_script_call_set(call, p++, check->check_only ? "?" :
						   receipts ? "=r" : "=");
		rl_script_call_set(call, p++, rl_redis_algorithm_arg(l));
		rl_script_call_set(call, p++, rl_redis_int(l->limit));
		rl_script_call_set(call, p++, rl_redis_int(l->window_us));
		rl_script_call_set(call, p++, rl_redis_int(rl_capacity(l)));
		for (int i = 0; i < n; i++)
		{
			/* A statement's costs repeat: format each run of them once. */
			if (i == 0 || check->costs[i] != check->costs[i - 1])
				cost = rl_redis_int(check->costs[i]);
			rl_script_call_set(call, p++, cost);
		}
		return;
	}
	rl_script_call_set(call, p++, receipts ? "+r" : "+");
	for (int i = 0; i < n; i++)
	{
		const RlLimiter *l = &check->limiters[i];

		rl_script_call_set(call, p++, rl_redis_algorithm_arg(l));
		rl_script_call_set(call, p++, rl_redis_int(l->limit));
		rl_script_call_set(call, p++, rl_redis_int(l->window_us));
		rl_script_call_set(call, p++, rl_redis_int(check->costs[i]));
		rl_script_call_set(call, p++, rl_redis_int(rl_capacity(l)));
	}
}

/*
 * A batch's checks of one limiter, one call: layered.lua's '*' form, with
 * keys, clock, '*' ('*r' with receipts), the limiter (algorithm, limit,
 * window, capacity) and each key's cost.
 */
static void
rl_redis_many_call(RlScriptCall *call, RlCheck *checks, const int *idx,
				   int n, bool receipts, const char *clock)
{
	const RlLimiter *l = &checks[idx[0]].limiters[0];
	int			p = 0;
	char	   *cost = NULL;

	rl_script_call_init(call, RL_SCRIPT_LAYERED, n, 2 * n + 6);
	for (int k = 0; k < n; k++)
		rl_script_call_set(call, p++, checks[idx[k]].keys[0]);
	rl_script_call_set(call, p++, clock);
	rl_script_call_set(call, p++, receipts ? "*r" : "*");
	rl_script_call_set(call, p++, rl_redis_algorithm_arg(l));
	rl_script_call_set(call, p++, rl_redis_int(l->limit));
	rl_script_call_set(call, p++, rl_redis_int(l->window_us));
	rl_script_call_set(call, p++, rl_redis_int(rl_capacity(l)));
	for (int k = 0; k < n; k++)
	{
		int64		c = checks[idx[k]].costs[0];

		if (k == 0 || c != checks[idx[k - 1]].costs[0])
			cost = rl_redis_int(c);
		rl_script_call_set(call, p++, cost);
	}
}

/* Four integers from element at of reply: one check's answer. */
static bool
rl_redis_answer_at(const redisReply *reply, size_t at, RlCheck *check)
{
	for (int i = 0; i < 4; i++)
	{
		if (reply->element[at + i]->type != REDIS_REPLY_INTEGER)
			return false;
	}
	check->answer.known = true;
	check->answer.allowed = reply->element[at]->integer != 0;
	check->answer.remaining = reply->element[at + 1]->integer;
	check->answer.retry_after_ms = reply->element[at + 2]->integer;
	check->answer.reset_after_ms = reply->element[at + 3]->integer;
	check->answered = true;
	return true;
}

/*
 * The receipt of rule at element at of reply (two integers, whole and
 * below 2^53: lua/common.lua's rl_one), into receipt (NULL: read, not
 * kept).
 */
static bool
rl_redis_receipt_at(const redisReply *reply, size_t at, RlReceipt *receipt)
{
	const redisReply *r1 = reply->element[at];
	const redisReply *r2 = reply->element[at + 1];

	if (r1->type != REDIS_REPLY_INTEGER || r2->type != REDIS_REPLY_INTEGER ||
		r1->integer < 0 || r2->integer < 0)
		return false;
	if (receipt != NULL)
	{
		receipt->r1 = r1->integer;
		receipt->r2 = r2->integer;
	}
	return true;
}

/*
 * A script's reply, whose shape is exact (lua/allow.lua, lua/layered.lua):
 *	 one limiter: {allowed, remaining, retry_after_ms, reset_after_ms},
 *		and, when receipts were asked for, r1, r2, the receipt of what an
 *		admitted call took (0, 0 else);
 *	 rules: the four, then the 1-based rule that decided, then, when
 *		receipts were asked for and the rules were admitted, each rule's
 *		r1, r2: 5 + 2 x nrules elements, else 5;
 *	 a batch's call: the four or six of one limiter for each of its n
 *		checks.
 * A check's receipts (when it keeps them) are filled when it was
 * admitted, zeros otherwise.  False for any other shape.
 */
static bool
rl_redis_answers(const redisReply *reply, RlCheck *checks, const int *idx,
				 const RlRedisCall *rc)
{
	RlCheck    *check = &checks[idx[rc->first]];
	size_t		width = rc->receipts ? 6 : 4;
	size_t		want;

	if (reply->type != REDIS_REPLY_ARRAY)
		return false;
	if (rc->many || !check->rules)
	{
		if (reply->elements != width * (size_t) rc->n)
			return false;
		for (int k = 0; k < rc->n; k++)
		{
			RlCheck    *c = &checks[idx[rc->first + k]];

			c->tightest = 0;
			if (!rl_redis_answer_at(reply, width * k, c) ||
				(rc->receipts &&
				 !rl_redis_receipt_at(reply, width * k + 4, c->receipts)))
				return false;
			if (c->receipts != NULL && !c->answer.allowed)
				memset(c->receipts, 0, sizeof(RlReceipt));
		}
		return true;
	}
	if (reply->elements < 5 ||
		reply->element[0]->type != REDIS_REPLY_INTEGER ||
		reply->element[4]->type != REDIS_REPLY_INTEGER ||
		reply->element[4]->integer < 1 ||
		reply->element[4]->integer > check->nrules)
		return false;
	want = 5;
	if (reply->element[0]->integer != 0 && rc->receipts)
		want += 2 * (size_t) check->nrules;
	if (reply->elements != want || !rl_redis_answer_at(reply, 0, check))
		return false;
	check->tightest = (int) reply->element[4]->integer - 1;
	for (int i = 0; i < check->nrules && want > 5; i++)
	{
		if (!rl_redis_receipt_at(reply, 5 + 2 * i,
								 check->receipts ? &check->receipts[i] : NULL))
			return false;
	}
	if (check->receipts != NULL && want == 5)
		memset(check->receipts, 0, sizeof(RlReceipt) * check->nrules);
	return true;
}

/* A batch being planned: its checks and their keys' slots. */
typedef struct RlRedisBatch
{
	const RlCheck *checks;
	const int  *slot;
} RlRedisBatch;

/* Sorts a batch's checks by limiter, then slot, then place. */
static int
rl_redis_batch_cmp(const void *a, const void *b, void *arg)
{
	const RlRedisBatch *batch = arg;
	int			ia = *(const int *) a;
	int			ib = *(const int *) b;
	const RlLimiter *la = batch->checks[ia].limiters;
	const RlLimiter *lb = batch->checks[ib].limiters;

	if (la != lb)
		return la < lb ? -1 : 1;
	if (batch->slot[ia] != batch->slot[ib])
		return batch->slot[ia] < batch->slot[ib] ? -1 : 1;
	return ia < ib ? -1 : (ia > ib);
}

/*
 * Orders the checks into calls (idx[], calls[]): rules and lone checks
 * one call each; a batch's checks of one limiter, RL_BATCH_KEYS per call
 * among those of one slot (cluster) or all (standalone).  Returns the
 * number of calls.
 */
static int
rl_redis_plan(RlCheck *checks, int n, int *idx, RlRedisCall *calls)
{
	bool		cluster = rl_redis_mode == RL_MODE_CLUSTER;
	int		   *slot;
	RlRedisBatch batch;
	int			ncalls = 0;
	int			nrules;
	int			m = 0;

	/* Rules first, in their order; then the batch, grouped. */
	for (int i = 0; i < n; i++)
	{
		if (checks[i].rules || n == 1)
			idx[m++] = i;
	}
	for (int i = 0; i < m; i++)
	{
		const RlCheck *c = &checks[idx[i]];

		calls[ncalls].first = i;
		calls[ncalls].n = 1;
		calls[ncalls].many = false;
		calls[ncalls].receipts = c->receipts != NULL &&
			!(c->rules && c->check_only);
		ncalls++;
	}
	if (m == n)
		return ncalls;
	slot = palloc0(sizeof(int) * n);
	for (int i = 0; i < n; i++)
	{
		if (checks[i].rules)
			continue;
		idx[m++] = i;
		if (cluster)
			slot[i] = rl_key_slot(checks[i].keys[0], strlen(checks[i].keys[0]));
	}
	batch.checks = checks;
	batch.slot = slot;
	nrules = ncalls;
	qsort_arg(idx + nrules, n - nrules, sizeof(int), rl_redis_batch_cmp,
			  &batch);
	for (int i = nrules; i < n; i++)
	{
		const RlCheck *c = &checks[idx[i]];

		/* After the batch's first check, the last call is the batch's. */
		if (i > nrules)
		{
			RlRedisCall *last = &calls[ncalls - 1];
			int			head = idx[last->first];

			if (last->n < RL_BATCH_KEYS &&
				checks[head].limiters == c->limiters &&
				slot[head] == slot[idx[i]])
			{
				last->n++;
				last->many = true;
				last->receipts |= c->receipts != NULL;
				continue;
			}
		}
		calls[ncalls].first = i;
		calls[ncalls].n = 1;
		calls[ncalls].many = false;
		calls[ncalls].receipts = c->receipts != NULL;
		ncalls++;
	}
	return ncalls;
}

/*
 * The store's check: the checks as script calls (rl_redis_plan), sent
 * together.  A call with no reply leaves its checks unanswered, with the
 * failure of its node.
 */
static void
rl_redis_check(RlCheck *checks, int n, RlWaitWork work)
{
	int		   *idx;
	RlRedisCall *plan;
	int			ncalls;
	RlScriptCall *calls;
	redisReply **replies;
	RlRedisNumbers nums = {0};
	const char *clock;
	bool		ran;
	bool		ok = true;

	/* Redis rests after a failure: nothing to build, nothing answered. */
	if (rl_conn_resting())
	{
		RlFailure  *failure = rl_conn_current_failure();

		for (int i = 0; i < n; i++)
		{
			checks[i].answered = false;
			checks[i].failure = failure;
		}
		return;
	}

	idx = palloc(sizeof(int) * n);
	plan = palloc(sizeof(RlRedisCall) * n);
	ncalls = rl_redis_plan(checks, n, idx, plan);
	calls = palloc(sizeof(RlScriptCall) * ncalls);
	replies = palloc0(sizeof(redisReply *) * ncalls);
	clock = rl_clock_arg();
	for (int j = 0; j < ncalls; j++)
	{
		RlCheck    *c = &checks[idx[plan[j].first]];

		for (int k = 0; k < plan[j].n; k++)
			checks[idx[plan[j].first + k]].answered = false;
		if (plan[j].many)
			rl_redis_many_call(&calls[j], checks, idx + plan[j].first,
							   plan[j].n, plan[j].receipts, clock);
		else if (c->rules)
			rl_redis_rules_call(&calls[j], c, clock);
		else
			rl_redis_single_call(&calls[j], c, &nums, clock);
	}

	rl_conn_set_wait_work(work);
	PG_TRY();
	{
		ran = rl_run_scripts(calls, ncalls, replies);
	}
	PG_FINALLY();
	{
		rl_conn_set_wait_work(NULL);
	}
	PG_END_TRY();

	if (ran)
	{
		for (int j = 0; j < ncalls && ok; j++)
		{
			if (replies[j] != NULL)
				ok = rl_redis_answers(replies[j], checks, idx, &plan[j]);
		}
		rl_free_replies(replies, ncalls);
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
	for (int j = 0; j < ncalls; j++)
	{
		RlNode	   *node = ran ? rl_scripts_call_node(j, ncalls) : NULL;
		RlFailure  *failure = NULL;

		for (int k = 0; k < plan[j].n; k++)
		{
			RlCheck    *c = &checks[idx[plan[j].first + k]];

			if (c->answered)
				continue;
			if (failure == NULL)
			{
				if (node != NULL)
					rl_conn_set_current(node);
				failure = rl_conn_current_failure();
			}
			c->failure = failure;
		}
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

/* Sorts refunds by hash slot, then by place (newest first, as given). */
static int
rl_redis_refund_cmp(const void *a, const void *b, void *arg)
{
	const int  *slot = arg;
	int			ia = *(const int *) a;
	int			ib = *(const int *) b;

	if (slot[ia] != slot[ib])
		return slot[ia] < slot[ib] ? -1 : 1;
	return ia < ib ? -1 : (ia > ib);
}

/*
 * The store's refund: lua/refund.lua with RL_BATCH_KEYS keys a call, the
 * keys of one call in one hash slot (a cluster), every call sent at once
 * (rl_run_scripts: one round trip per node, with the command timeout).
 * Per key: the algorithm as rl_redis_algorithm_arg names it, limit,
 * window, capacity, cost and the receipt.  A call Redis answered with an
 * integer per key delivered its refunds; any other reply delivered none
 * and drops the link.  Returns the failure of a node that kept some
 * undelivered, or NULL.
 */
static RlFailure *
rl_redis_refund(RlRefund *refunds, int n)
{
	bool		cluster = rl_redis_mode == RL_MODE_CLUSTER;
	int		   *idx = palloc(sizeof(int) * n);
	int		   *slot = palloc0(sizeof(int) * n);
	int		   *first = palloc(sizeof(int) * n);
	int		   *count = palloc(sizeof(int) * n);
	RlScriptCall *calls = palloc(sizeof(RlScriptCall) * n);
	redisReply **replies = palloc0(sizeof(redisReply *) * n);
	const char *clock = rl_clock_arg();
	RlFailure  *failure = NULL;
	int			ncalls = 0;
	bool		ran;

	for (int i = 0; i < n; i++)
	{
		idx[i] = i;
		if (cluster)
			slot[i] = rl_key_slot(refunds[i].key, strlen(refunds[i].key));
	}
	if (cluster)
		qsort_arg(idx, n, sizeof(int), rl_redis_refund_cmp, slot);
	for (int i = 0; i < n; i++)
	{
		if (i > 0 && count[ncalls - 1] < RL_BATCH_KEYS &&
			slot[idx[i]] == slot[idx[first[ncalls - 1]]])
		{
			count[ncalls - 1]++;
			continue;
		}
		first[ncalls] = i;
		count[ncalls++] = 1;
	}
	for (int j = 0; j < ncalls; j++)
	{
		int			k = count[j];
		int			p = k + 1;

		rl_script_call_init(&calls[j], RL_SCRIPT_REFUND, k, 8 * k + 1);
		rl_script_call_set(&calls[j], k, clock);
		for (int q = 0; q < k; q++)
		{
			RlRefund   *r = &refunds[idx[first[j] + q]];
			const RlLimiter *l = &r->limiter;

			rl_script_call_set(&calls[j], q, r->key);
			rl_script_call_set(&calls[j], p++, rl_redis_algorithm_arg(l));
			rl_script_call_set(&calls[j], p++, rl_redis_int(l->limit));
			rl_script_call_set(&calls[j], p++, rl_redis_int(l->window_us));
			rl_script_call_set(&calls[j], p++, rl_redis_int(rl_capacity(l)));
			rl_script_call_set(&calls[j], p++, rl_redis_int(r->cost));
			rl_script_call_set(&calls[j], p++, rl_redis_int(r->receipt.r1));
			rl_script_call_set(&calls[j], p++, rl_redis_int(r->receipt.r2));
		}
	}

	ran = rl_run_scripts(calls, ncalls, replies);
	for (int j = 0; j < ncalls; j++)
	{
		redisReply *reply = ran ? replies[j] : NULL;
		bool		ok = reply != NULL && reply->type == REDIS_REPLY_ARRAY &&
			reply->elements == (size_t) count[j];

		for (int q = 0; ok && q < count[j]; q++)
			ok = reply->element[q]->type == REDIS_REPLY_INTEGER;
		if (ok)
		{
			for (int q = 0; q < count[j]; q++)
				refunds[idx[first[j] + q]].done = true;
			continue;
		}
		if (reply != NULL)
		{
			/* A peer out of step: nothing after it can be trusted. */
			rl_conn_drop();
			continue;
		}
		if (failure == NULL)
		{
			RlNode	   *node = ran ? rl_scripts_call_node(j, ncalls) : NULL;

			if (node != NULL)
				rl_conn_set_current(node);
			failure = rl_conn_current_failure();
		}
	}
	if (ran)
		rl_free_replies(replies, ncalls);
	return failure;
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
	.probe = rl_redis_probe,
	.refund = rl_redis_refund,
};
