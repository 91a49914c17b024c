/*-------------------------------------------------------------------------
 *
 * rl_hold.c
 *	  rl_hold and rl_release: a concurrency slot held for the session.
 *
 * A concurrency check (lua/concurrency.lua) holds its slot until its
 * transaction ends.  Work that spans transactions (a procedure that
 * commits as it goes, a client that batches over several) holds one with
 * rl_hold instead: the slot stays until rl_release(holder) or the
 * backend's exit, or, if neither comes (the backend was killed, Redis was
 * unreachable then), until its lease, the window, ends.  A holder is a
 * number of this session's: another session cannot release it.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_hold.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "rl_args.h"
#include "rl_engine.h"
#include "rl_policies.h"

PG_FUNCTION_INFO_V1(rl_hold);
PG_FUNCTION_INFO_V1(rl_hold_policy);
PG_FUNCTION_INFO_V1(rl_release);

/*
 * The hold: one concurrency check, its row (allowed, holder, remaining,
 * retry_after_ms, reset_after_ms); holder NULL when nothing is held.
 */
static Datum
rl_hold_run(FunctionCallInfo fcinfo, const RlLimiter *limiter, char *key,
			int keylen, int64 cost)
{
	TupleDesc	desc;
	RlAnswer	answer;
	int64		holder;
	Datum		values[5];
	bool		nulls[5] = {0};

	if (limiter->algorithm != RL_CONCURRENCY)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rl_hold needs a concurrency limit, not %s",
						rl_algorithm_name(limiter->algorithm)),
				 errhint("Name a policy whose algo is concurrency.")));
	rl_check_cost(cost, limiter);
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	desc = BlessTupleDesc(desc);

	holder = rl_engine_hold(limiter, key, keylen, cost, &answer);
	values[0] = BoolGetDatum(answer.allowed);
	values[1] = Int64GetDatum(holder);
	nulls[1] = holder == 0;
	values[2] = Int64GetDatum(answer.remaining);
	nulls[2] = !answer.known;
	values[3] = Int64GetDatum(answer.retry_after_ms);
	values[4] = Int64GetDatum(answer.reset_after_ms);
	nulls[4] = !answer.known;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/* rl_hold(key, "limit", "window", cost DEFAULT 1): a concurrency slot. */
Datum
rl_hold(PG_FUNCTION_ARGS)
{
	RlLimiter	limiter = {0};
	char	   *key;
	int			keylen;

	for (int i = 0; i < 4; i++)
	{
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("rl_hold's arguments must not be null")));
	}
	key = rl_check_key(PG_GETARG_TEXT_PP(0), &keylen);
	limiter.algorithm = RL_CONCURRENCY;
	limiter.limit = PG_GETARG_INT64(1);
	limiter.window_us = rl_window_us(PG_GETARG_INTERVAL_P(2));
	rl_check_limiter(&limiter);
	return rl_hold_run(fcinfo, &limiter, key, keylen, PG_GETARG_INT64(3));
}

/* rl_hold(key, policy, cost DEFAULT 1): a slot of a concurrency policy. */
Datum
rl_hold_policy(PG_FUNCTION_ARGS)
{
	RlLimiter	limiter;
	char	   *key;
	int			keylen;

	for (int i = 0; i < 3; i++)
	{
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("rl_hold's arguments must not be null")));
	}
	key = rl_check_key(PG_GETARG_TEXT_PP(0), &keylen);
	rl_policy_get_text(PG_GETARG_TEXT_PP(1), &limiter);
	return rl_hold_run(fcinfo, &limiter, key, keylen, PG_GETARG_INT64(2));
}

/* rl_release(holder): this session's hold given back; false if none. */
Datum
rl_release(PG_FUNCTION_ARGS)
{
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("rl_release's holder must not be null")));
	PG_RETURN_BOOL(rl_engine_release(PG_GETARG_INT64(0)));
}
