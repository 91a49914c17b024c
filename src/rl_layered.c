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
 * This file reads the rules (rl_rule[], rl_burst_rule[]) and holds the
 * SQL entry points rl_allow_layered, rl_peek_layered and rl_reset_layered;
 * the script call, its counters and its policy answer are rl_engine.c's
 * (rl_engine_check_rules).
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

#include "rl_args.h"
#include "rl_engine.h"
#include "rl_policies.h"
#include "rl_postgrest.h"
#include "rl_stats.h"

/* Rules per layered call: enough for any policy, small enough to read. */
#define RL_MAX_RULES	16

PG_FUNCTION_INFO_V1(rl_allow_layered);
PG_FUNCTION_INFO_V1(rl_peek_layered);
PG_FUNCTION_INFO_V1(rl_reset_layered);

/* Names the rule in the CONTEXT of an error about its values or the cost. */
static void
rl_rule_context(void *arg)
{
	errcontext("rule %d of the rules argument", *(int *) arg);
}

/*
 * Reads a text[] argument of policy names (0.5.0) into limiters: each
 * rule a policy of rl_policies (rl_policies.c), named once.
 */
static int
rl_parse_policies(ArrayType *arr, RlLimiter *limiters)
{
	Datum	   *elems;
	int			n;

	elems = rl_array_elements(arr, "policies", &n);
	if (n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at least one policy is required")));
	if (n > RL_MAX_RULES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("at most %d policies can be layered, not %d",
						RL_MAX_RULES, n)));
	for (int i = 0; i < n; i++)
	{
		rl_policy_get_text(DatumGetTextPP(elems[i]), &limiters[i]);
		for (int j = 0; j < i; j++)
		{
			if (strcmp(limiters[j].name, limiters[i].name) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("policies %d and %d are the same policy \"%s\"",
								j + 1, i + 1, limiters[i].name),
						 errdetail("A layered call takes each policy once.")));
		}
	}
	return n;
}

/*
 * Reads an rl_rule[] or rl_burst_rule[] argument into limiters, checking each rule as
 * rl_allow checks its arguments.  Two rules of one algorithm and window
 * are an error rather than a surprise: two equal rules would be one
 * limiter counted twice, and two that differ are rarely meant.
 */
static int
rl_parse_rules(ArrayType *arr, RlLimiter *limiters)
{
	Datum	   *elems;
	int			n;
	int			ruleno;
	int			nfields;
	ErrorContextCallback context;

	if (ARR_ELEMTYPE(arr) == TEXTOID)
		return rl_parse_policies(arr, limiters);
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
						 errdetail("A layered call takes one rule per algorithm and window."),
						 errhint("Keep one of them, or give them different windows.")));
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
		keys[i] = rl_redis_key(bytes, keylen, &limiters[i]);
	return keys;
}

/* Shared by rl_allow_layered and rl_peek_layered. */
static Datum
rl_layered_internal(FunctionCallInfo fcinfo, int64 cost)
{
	RlLimiter	limiters[RL_MAX_RULES] = {0};
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

	rl_engine_check_rules(keys, limiters, costs, n, &answer);

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
	RlLimiter	limiters[RL_MAX_RULES] = {0};
	char	  **keys;
	int			n;

	rl_require_args(fcinfo, 2);
	n = rl_parse_rules(PG_GETARG_ARRAYTYPE_P(1), limiters);
	keys = rl_layered_keys(PG_GETARG_TEXT_PP(0), limiters, n);
	PG_RETURN_BOOL(rl_engine_reset(keys, n));
}
