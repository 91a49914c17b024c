/*-------------------------------------------------------------------------
 *
 * rl_layered.c
 *	  Layered limits: several rules checked and consumed all or nothing.
 *
 * "5 per second AND 100 per minute AND 1000 per day" as separate rl_allow
 * calls would let a call that the daily rule refuses still use up the
 * per-second quota.  Here one Lua script (lua/layered.lua) checks every
 * rule and consumes from all of them only if all admit the call, so no
 * rule is polluted by a call another rule refused.  The same script
 * checks a statement trigger's keys, one rule per key.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_layered.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "executor/executor.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "rl_cache.h"
#include "rl_scripts.h"
#include "rl_stats.h"

/* Rules per layered call: enough for any policy, small enough to read. */
#define RL_MAX_RULES	16

PG_FUNCTION_INFO_V1(rl_allow_layered);
PG_FUNCTION_INFO_V1(rl_peek_layered);
PG_FUNCTION_INFO_V1(rl_reset_layered);

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

/* Names the rule in the CONTEXT of an error about its values or the cost. */
static void
rl_rule_context(void *arg)
{
	errcontext("rule %d of the rules argument", *(int *) arg);
}

/*
 * Reads an rl_rule[] or rl_burst_rule[] argument into limiters, checking each rule as
 * rl_allow checks its arguments.  Two rules of one algorithm and window
 * would share a Redis key, so that is an error rather than a surprise.
 */
static int
rl_parse_rules(ArrayType *arr, RlLimiter *limiters)
{
	Datum	   *elems;
	int			n;
	int			ruleno;
	int			nfields;
	ErrorContextCallback context;

	elems = rl_array_elements(arr, "rules", &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at least one rule is required")));
	if (n > RL_MAX_RULES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at most %d rules can be layered, not %d",
						RL_MAX_RULES, n)));

	/*
	 * rl_burst_rule has a fourth attribute, burst (NULL: the limit);
	 * rl_rule has three, so that rules written for 0.2.0 still cast.
	 */
	{
		TupleDesc	desc = lookup_rowtype_tupdesc(ARR_ELEMTYPE(arr), -1);

		nfields = desc->natts;
		ReleaseTupleDesc(desc);
	}

	for (int i = 0; i < n; i++)
	{
		HeapTupleHeader rule;
		Datum		field[3];
		bool		isnull[3];
		Datum		burst = (Datum) 0;
		bool		noburst = true;

		rule = DatumGetHeapTupleHeader(elems[i]);
		if (nfields >= 4)
			burst = GetAttributeByNum(rule, 4, &noburst);
		for (int f = 0; f < 3; f++)
		{
			field[f] = GetAttributeByNum(rule, f + 1, &isnull[f]);
			if (isnull[f])
				ereport(ERROR,
						(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						 errmsg("rule %d has a null %s", i + 1,
								f == 0 ? "algo" : f == 1 ? "limit" : "window")));
		}
		ruleno = i + 1;
		context.callback = rl_rule_context;
		context.arg = &ruleno;
		context.previous = error_context_stack;
		error_context_stack = &context;
		limiters[i].algorithm = rl_parse_algorithm(DatumGetTextPP(field[0]));
		limiters[i].limit = DatumGetInt64(field[1]);
		limiters[i].window_us = rl_window_us(DatumGetIntervalP(field[2]));
		limiters[i].burst = noburst ? 0 : rl_check_burst(DatumGetInt64(burst));
		rl_check_limiter(&limiters[i]);
		error_context_stack = context.previous;

		for (int j = 0; j < i; j++)
		{
			if (limiters[j].algorithm == limiters[i].algorithm &&
				limiters[j].window_us == limiters[i].window_us)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("rules %d and %d have the same algorithm and window",
								j + 1, i + 1),
						 errdetail("Rules of one algorithm and window share their state, so only one of them can apply."),
						 errhint("Keep the rule with the smaller limit.")));
		}
	}
	return n;
}

/* The Redis keys of a layered limiter: one per rule, under one hash tag. */
static char **
rl_layered_keys(text *key, const RlLimiter *limiters, int n)
{
	int			keylen;
	char	   *bytes = rl_check_key(key, &keylen);
	char	  **keys = palloc(sizeof(char *) * n);

	for (int i = 0; i < n; i++)
		keys[i] = rl_redis_key(bytes, keylen, &limiters[i], true);
	return keys;
}

/* Shared by rl_allow_layered and rl_peek_layered. */
static Datum
rl_layered_internal(FunctionCallInfo fcinfo, int64 cost)
{
	RlLimiter	limiters[RL_MAX_RULES];
	int64		costs[RL_MAX_RULES];
	char	  **keys;
	int			n;
	RlAnswer	answer;
	TupleDesc	desc;

	n = rl_parse_rules(PG_GETARG_ARRAYTYPE_P(1), limiters);
	for (int i = 0; i < n; i++)
	{
		int			rule = i + 1;
		ErrorContextCallback context;

		context.callback = rl_rule_context;
		context.arg = &rule;
		context.previous = error_context_stack;
		error_context_stack = &context;
		rl_check_cost(cost, &limiters[i]);
		error_context_stack = context.previous;
		costs[i] = cost;
	}
	keys = rl_layered_keys(PG_GETARG_TEXT_PP(0), limiters, n);

	rl_check_rules(keys, limiters, costs, n, &answer);

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	desc = BlessTupleDesc(desc);
	return HeapTupleGetDatum(rl_answer_tuple(desc, &answer));
}

/*
 * rl_allow_layered(key, rules rl_rule[], cost DEFAULT 1) RETURNS rl_result
 *
 * allowed is false if any rule refuses; then nothing is consumed anywhere.
 * remaining is the smallest over the rules, retry_after_ms the largest
 * wait among the refusing rules, reset_after_ms the largest.
 */
Datum
rl_allow_layered(PG_FUNCTION_ARGS)
{
	rl_require_args(fcinfo, 3);
	return rl_layered_internal(fcinfo, PG_GETARG_INT64(2));
}

/* rl_peek_layered(key, rules): rl_allow_layered's answer for cost 0. */
Datum
rl_peek_layered(PG_FUNCTION_ARGS)
{
	rl_require_args(fcinfo, 2);
	return rl_layered_internal(fcinfo, 0);
}

/*
 * rl_reset_layered(key, rules) RETURNS boolean
 *
 * Forgets every rule's state in one DEL; true if any existed.  Like
 * rl_reset, an unavailable Redis is an ERROR.
 */
Datum
rl_reset_layered(PG_FUNCTION_ARGS)
{
	RlLimiter	limiters[RL_MAX_RULES];
	char	  **keys;
	int			n;

	rl_require_args(fcinfo, 2);
	n = rl_parse_rules(PG_GETARG_ARRAYTYPE_P(1), limiters);
	keys = rl_layered_keys(PG_GETARG_TEXT_PP(0), limiters, n);
	PG_RETURN_BOOL(rl_delete_keys(keys, n));
}
