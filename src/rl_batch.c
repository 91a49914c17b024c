/*-------------------------------------------------------------------------
 *
 * rl_batch.c
 *	  rl_allow_many: many keys against one limiter in one round trip.
 *
 * A caller with a set of keys (the recipients of a message, the rows of
 * an import) would pay one network round trip per rl_allow call.  Here
 * the checks are queued on the connection, written at once, and the
 * replies read back in order: up to 250 keys cost one round trip.  Each
 * key is still its own atomic script run, so the answers are exactly
 * those of N rl_allow calls made one after another, in array order.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_batch.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

#include "rl_args.h"
#include "rl_engine.h"
#include "rl_policies.h"
#include "rl_postgrest.h"
#include "rl_stats.h"

/*
 * Keys per round trip.  All replies of a round trip must arrive within
 * one command_timeout, while Redis runs these scripts and every other
 * client's; a timeout answers every key of the round trip by the failure
 * policy.  Each script is bounded (20 to 30 us, the dearest 0.3 ms, on
 * the reference machine: test/t/011_redis_work.pl), so the work of a
 * round trip is its number of keys: 250 of them ask 5 to 8 ms of Redis,
 * so that forty callers at once still fit within a 300 ms timeout, for
 * three round trips more per 1000 keys than one pipeline of 1000.
 * Redis serves other clients between reads of a pipeline's input (16 kB,
 * about a hundred of these commands), so other clients wait for at most
 * that many scripts, whatever the size of the round trip.
 */
#define RL_BATCH_CHUNK	250

/* Keys per call: bounds the time one call holds Redis and the memory it takes. */
#define RL_MAX_BATCH	100000

PG_FUNCTION_INFO_V1(rl_allow_many);
PG_FUNCTION_INFO_V1(rl_allow_many_policy);

/* An array argument's elements, at most RL_MAX_BATCH of them. */
static Datum *
rl_batch_elements(FunctionCallInfo fcinfo, int argno, const char *what,
				  int *n)
{
	Datum	   *elems = rl_array_elements(PG_GETARG_ARRAYTYPE_P(argno), what, n);

	if (*n > RL_MAX_BATCH)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("too many keys in one rl_allow_many call: %d", *n),
				 errdetail("At most %d keys are checked in one call.", RL_MAX_BATCH),
				 errhint("Split the keys into several calls.")));
	return elems;
}

/* True when this call is the overload with one cost per key (at argno). */
static bool
rl_has_cost_array(FunctionCallInfo fcinfo, int argno)
{
	Oid		   *argtypes;
	int			nargs;

	get_func_signature(fcinfo->flinfo->fn_oid, &argtypes, &nargs);
	return nargs > argno && argtypes[argno] == INT8ARRAYOID;
}

/*
 * rl_allow_many(keys text[], algo, limit, window, cost bigint DEFAULT 1,
 *				 burst bigint DEFAULT NULL)
 * rl_allow_many(keys text[], algo, limit, window, costs bigint[],
 *				 burst bigint DEFAULT NULL)
 *	 RETURNS TABLE(key, allowed, remaining, retry_after_ms, reset_after_ms)
 *
 * One row per key, in array order.  A key listed twice is checked twice,
 * the second check seeing the first one's consumption.  Every key and
 * cost is checked before anything is sent, so bad input costs nothing.
 * While Redis is unavailable every row is the failure policy's answer
 * (from the round trip that failed on, if Redis goes away midway).
 */
/* Names the array element an error is about in its CONTEXT. */
static void
rl_element_context(void *arg)
{
	errcontext("element %d of the keys argument", *(int *) arg);
}

static Datum rl_allow_many_run(FunctionCallInfo fcinfo, Datum *keys, int n,
								const RlLimiter *limiter, int costarg);

Datum
rl_allow_many(PG_FUNCTION_ARGS)
{
	RlLimiter	limiter = {0};
	Datum	   *keys;
	int			n;

	rl_require_args(fcinfo, 5);
	keys = rl_batch_elements(fcinfo, 0, "keys", &n);
	limiter.algorithm = rl_parse_algorithm(PG_GETARG_TEXT_PP(1));
	limiter.limit = PG_GETARG_INT64(2);
	limiter.window_us = rl_window_us(PG_GETARG_INTERVAL_P(3));
	limiter.burst = rl_burst_arg(fcinfo, 5);
	rl_check_limiter(&limiter);
	return rl_allow_many_run(fcinfo, keys, n, &limiter, 4);
}

/*
 * rl_allow_many(keys text[], policy text, cost bigint DEFAULT 1)
 * rl_allow_many(keys text[], policy text, costs bigint[])
 *
 * By policy name (rl_policies); what the parameter forms return.
 */
Datum
rl_allow_many_policy(PG_FUNCTION_ARGS)
{
	RlLimiter	limiter;
	Datum	   *keys;
	int			n;

	rl_require_args(fcinfo, 3);
	keys = rl_batch_elements(fcinfo, 0, "keys", &n);
	rl_policy_get_text(PG_GETARG_TEXT_PP(1), &limiter);
	return rl_allow_many_run(fcinfo, keys, n, &limiter, 2);
}

/*
 * The batch of n keys against limiter, each key costing the argument
 * costarg (a bigint, or a bigint[] of one cost per key).
 */
static Datum
rl_allow_many_run(FunctionCallInfo fcinfo, Datum *keys, int n,
				  const RlLimiter *limiter, int costarg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	char	  **keyptrs;
	int		   *keylens;
	int64	   *costs;
	RlAnswer   *answers;
	int			element = 0;
	ErrorContextCallback context;
	MemoryContext chunk;

	costs = palloc(sizeof(int64) * Max(n, 1));
	if (rl_has_cost_array(fcinfo, costarg))
	{
		int			ncosts;
		Datum	   *c = rl_batch_elements(fcinfo, costarg, "costs", &ncosts);

		if (ncosts != n)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("keys and costs must have the same length"),
					 errdetail("There are %d keys and %d costs.", n, ncosts)));
		for (int i = 0; i < n; i++)
			costs[i] = DatumGetInt64(c[i]);
	}
	else
	{
		for (int i = 0; i < n; i++)
			costs[i] = PG_GETARG_INT64(costarg);
	}

	keyptrs = palloc(sizeof(char *) * Max(n, 1));
	keylens = palloc(sizeof(int) * Max(n, 1));
	context.callback = rl_element_context;
	context.arg = &element;
	context.previous = error_context_stack;
	error_context_stack = &context;
	for (int i = 0; i < n; i++)
	{
		element = i + 1;
		keyptrs[i] = rl_check_key(DatumGetTextPP(keys[i]), &keylens[i]);
		rl_check_cost(costs[i], limiter);
	}
	error_context_stack = context.previous;

	InitMaterializedSRF(fcinfo, 0);
	if (n == 0)
		return (Datum) 0;

	/*
	 * What a round trip builds (Redis keys, commands) is freed after it,
	 * so a call's memory stays what its arguments and answers need: 100 000
	 * keys would otherwise leave tens of megabytes that the backend keeps.
	 */
	answers = palloc(sizeof(RlAnswer) * n);
	chunk = AllocSetContextCreate(CurrentMemoryContext, "rl_allow_many round trip",
								  ALLOCSET_DEFAULT_SIZES);
	for (int i = 0; i < n; i += RL_BATCH_CHUNK)
	{
		MemoryContext old = MemoryContextSwitchTo(chunk);

		CHECK_FOR_INTERRUPTS();
		rl_engine_check_keys(limiter, keyptrs + i, keylens + i, costs + i,
							 Min(RL_BATCH_CHUNK, n - i), answers + i);
		MemoryContextSwitchTo(old);
		MemoryContextReset(chunk);
	}
	MemoryContextDelete(chunk);

	for (int i = 0; i < n; i++)
	{
		Datum		values[5];
		bool		nulls[5] = {false, false, !answers[i].known, false,
		!answers[i].known};

		values[0] = keys[i];
		values[1] = BoolGetDatum(answers[i].allowed);
		values[2] = Int64GetDatum(answers[i].remaining);
		values[3] = Int64GetDatum(answers[i].retry_after_ms);
		values[4] = Int64GetDatum(answers[i].reset_after_ms);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}
