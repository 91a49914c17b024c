/*-------------------------------------------------------------------------
 *
 * rl_acquire.c
 *	  rl_acquire: wait for a slot instead of failing.
 *
 * A stored procedure that calls a rate-limited service in a loop wants
 * to wait until its call may go, not to handle a denial.  rl_acquire
 * checks as rl_allow does (through rl_engine_check_keys, so the deny cache, the
 * failure policy, shadow mode and the counters all apply), and while it
 * is denied sleeps on the backend's latch for the retry_after_ms Redis
 * gave, then checks again; the call that is admitted has consumed.  It
 * gives up with the denial when the wait would run past max_wait.
 *
 * Fairness: waiters are not queued.  Each sleeps until the moment its
 * call could be admitted (plus a small random jitter, so that waiters
 * that saw one state do not all ask at the same instant); whoever asks
 * first when a unit frees takes it, a newcomer included.  What holds is
 * exactness (every admission is the script's, so no more pass than the
 * limiter allows) and that no waiter sleeps past the first moment it
 * could be admitted by more than the jitter.  README, "Waiting for a
 * slot", gives the figures of test/t/020_acquire.pl.
 *
 * With ratelimit.test_clock_ms set (tests), rl_acquire never sleeps: it
 * moves the pinned clock forward by each wait for its own checks, so a
 * pg_regress test sees what the waits would give, and puts the setting
 * back when it returns.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_acquire.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "common/pg_prng.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "rl_args.h"
#include "rl_engine.h"
#include "rl_policies.h"
#include "rl_postgrest.h"
#include "rl_stats.h"

/* The longest max_wait: statement_timeout is the tool for longer waits. */
#define RL_MAX_WAIT_US	(INT64CONST(3600) * USECS_PER_SEC)

PG_FUNCTION_INFO_V1(rl_acquire);
PG_FUNCTION_INFO_V1(rl_acquire_policy);

static Datum rl_acquire_run(FunctionCallInfo fcinfo, const RlLimiter *limiter,
							char *key, int keylen, int64 cost, int64 wait_us);

/* max_wait in microseconds: 0 (one check) up to an hour. */
static int64
rl_max_wait_us(Interval *max_wait)
{
	double		us;

	us = (double) max_wait->month * DAYS_PER_MONTH * USECS_PER_DAY +
		(double) max_wait->day * USECS_PER_DAY +
		(double) max_wait->time;
	if (us < 0 || us > RL_MAX_WAIT_US)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_wait must be between 0 and 1 hour"),
				 errhint("Use statement_timeout to bound longer waits.")));
	return (int64) us;
}

/*
 * The extra sleep after a wait of ms milliseconds: up to a tenth of it,
 * at most 50 ms.  Waiters told the same wait then ask one by one.
 */
static int64
rl_jitter_ms(int64 ms)
{
	int64		span = Min(ms / 10, 50);

	if (span <= 0)
		return 0;
	return (int64) pg_prng_uint64_range(&pg_global_prng_state, 0, span);
}

/* How often rl_acquire asks again for a concurrency slot. */
#define RL_CONCURRENCY_POLL_MS	20

/*
 * Sleeps ms milliseconds on the latch.  Another wake-up (a signal, the
 * latch set) sleeps again for what is left; cancel, statement_timeout
 * and termination take effect at once through CHECK_FOR_INTERRUPTS.
 */
static void
rl_sleep_ms(int64 ms)
{
	TimestampTz until = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), ms);

	for (;;)
	{
		long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
														   until);

		if (left <= 0)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 left, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * The wait loop.  wait_us is max_wait; each round is one check.  Returns
 * the admission, or the denial that ended the wait: one whose wait does
 * not fit in what is left of max_wait, or the failure policy's answer
 * (Redis unavailable: waiting would only hold the caller longer).
 */
static void
rl_acquire_loop(const RlLimiter *limiter, char *key, int keylen, int64 cost,
				int64 wait_us, RlAnswer *answer)
{
	bool		pinned = rl_test_clock_ms > 0;
	int64		waited_us = 0;
	TimestampTz start = GetCurrentTimestamp();

	for (;;)
	{
		int64		wait_ms;

		rl_engine_check_keys(limiter, &key, &keylen, &cost, 1, answer);
		if (answer->allowed || !answer->known)
			return;

		wait_ms = Max(answer->retry_after_ms, 1);

		/*
		 * A concurrency slot frees when a holder's transaction ends, before
		 * the lease end the denial reports: ask again every
		 * RL_CONCURRENCY_POLL_MS until max_wait.
		 */
		if (limiter->algorithm == RL_CONCURRENCY)
			wait_ms = Min(wait_ms, RL_CONCURRENCY_POLL_MS);
		if (!pinned)
			waited_us = GetCurrentTimestamp() - start;
		if (waited_us + wait_ms * 1000 > wait_us)
			return;

		if (pinned)
		{
			/* Tests: the pinned clock stands for the time slept. */
			rl_test_clock_ms += wait_ms;
			waited_us += wait_ms * 1000;
		}
		else
			rl_sleep_ms(wait_ms + rl_jitter_ms(wait_ms));
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * rl_acquire(key, algo, limit, window, cost DEFAULT 1,
 *			  max_wait DEFAULT '1 second', burst DEFAULT NULL)
 *	 RETURNS rl_result
 *
 * rl_allow that waits up to max_wait for the call to be admitted.
 */
Datum
rl_acquire(PG_FUNCTION_ARGS)
{
	RlLimiter	limiter = {0};
	char	   *key;
	int			keylen;
	int64		cost;
	int64		wait_us;

	rl_require_args(fcinfo, 6);
	key = rl_check_key(PG_GETARG_TEXT_PP(0), &keylen);
	limiter.algorithm = rl_parse_algorithm(PG_GETARG_TEXT_PP(1));
	limiter.limit = PG_GETARG_INT64(2);
	limiter.window_us = rl_window_us(PG_GETARG_INTERVAL_P(3));
	limiter.burst = rl_burst_arg(fcinfo, 6);
	rl_check_limiter(&limiter);
	cost = PG_GETARG_INT64(4);
	rl_check_cost(cost, &limiter);
	wait_us = rl_max_wait_us(PG_GETARG_INTERVAL_P(5));
	return rl_acquire_run(fcinfo, &limiter, key, keylen, cost, wait_us);
}

/*
 * rl_acquire(key, policy, max_wait, cost DEFAULT 1) RETURNS rl_result
 *
 * By policy name (rl_policies).  max_wait comes before cost and has no
 * default: the parameter form's four arguments are (text, text, bigint,
 * interval), so a call with a number or an interval in third or fourth
 * place picks one form; only two untyped literals there (a quoted
 * string, NULL) fit both, and must be cast.
 */
Datum
rl_acquire_policy(PG_FUNCTION_ARGS)
{
	RlLimiter	limiter;
	char	   *key;
	int			keylen;
	int64		cost;
	int64		wait_us;

	rl_require_args(fcinfo, 4);
	key = rl_check_key(PG_GETARG_TEXT_PP(0), &keylen);
	rl_policy_get_text(PG_GETARG_TEXT_PP(1), &limiter);
	wait_us = rl_max_wait_us(PG_GETARG_INTERVAL_P(2));
	cost = PG_GETARG_INT64(3);
	rl_check_cost(cost, &limiter);
	return rl_acquire_run(fcinfo, &limiter, key, keylen, cost, wait_us);
}

/* The wait, the pinned clock put back whatever happens, and the row. */
static Datum
rl_acquire_run(FunctionCallInfo fcinfo, const RlLimiter *limiter, char *key,
			   int keylen, int64 cost, int64 wait_us)
{
	RlAnswer	answer;
	double		clock = rl_test_clock_ms;
	TupleDesc	desc;

	PG_TRY();
	{
		rl_acquire_loop(limiter, key, keylen, cost, wait_us, &answer);
	}
	PG_FINALLY();
	{
		rl_test_clock_ms = clock;
	}
	PG_END_TRY();

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	desc = BlessTupleDesc(desc);
	return HeapTupleGetDatum(rl_answer_tuple(desc, &answer));
}
