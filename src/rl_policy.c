/*-------------------------------------------------------------------------
 *
 * rl_policy.c
 *	  The failure policy: everything ratelimit.failure_mode decides.
 *
 * A store leaves a check unanswered when it cannot answer it (Redis down,
 * stalled, misconfigured or unable to serve; the local table full), with
 * an RlFailure that says why.  Here, and nowhere else:
 *
 * - the answer meanwhile: open admits; closed denies, with the store's
 *   own wait before it tries again; error raises; local asks this
 *   server's local store, and denies what it cannot answer either;
 * - the WARNING that tells an operator, rate-limited per source of
 *   failures (once a minute for a Redis node, once a second for the
 *   local table, at once after a success), with the count of the
 *   failures it did not report;
 * - the counters of those answers (rl_status: fail_open, fail_closed,
 *   fail_local);
 * - the WARNING for refunds of aborted work that could not be given back
 *   (rl_refund.c counts them), at most once a minute per backend;
 * - rl_reset's rule: administrative, so a store that cannot forget the
 *   keys is an ERROR whatever the mode, and under failure_mode = local
 *   (the server's, or a policy's) the local store's copy is forgotten too.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_policy.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "rl_guc.h"
#include "rl_policy.h"
#include "rl_stats.h"

/* Most one WARNING per source of failures per interval. */
#define RL_WARN_INTERVAL_MS		60000
#define RL_WARN_FULL_INTERVAL_MS	1000

/*
 * What the policy does with calls while a store cannot be used, for the
 * WARNING: an operator reading the log must know whether calls are let
 * through.  The local table full under failure_mode = local denies only
 * the calls that need room.
 */
static const char *
rl_policy_words(const RlFailure *failure, RlFailureMode mode)
{
	if (failure->reason == RL_FAILED_FULL && mode == RL_FAIL_LOCAL)
		return failure->log_full ?
			"calls that need more room are denied" :
			"calls that need a new entry are denied";
	if (!rl_enforce && mode != RL_FAIL_ERROR)
		return "calls are let through (ratelimit.enforce is off)";
	if (mode != rl_failure_mode)
	{
		switch (mode)
		{
			case RL_FAIL_OPEN:
				return "calls are let through (their policy's failure_mode is \"open\")";
			case RL_FAIL_CLOSED:
				return "calls are denied (their policy's failure_mode is \"closed\")";
			case RL_FAIL_LOCAL:
				return "calls are answered by this server's local engine (their policy's failure_mode is \"local\")";
			default:
				return "calls raise an error (their policy's failure_mode is \"error\")";
		}
	}
	switch (mode)
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

/* The failure as the store words it (rl_status().last_error for Redis). */
static void
rl_policy_detail(const RlFailure *failure, char *buf, size_t len)
{
	strlcpy(buf, failure->what, len);
}

/*
 * Warns of the failures recorded in failure since the policy last looked:
 * the first at once, then at most one per interval, the next one telling
 * how many were not reported.
 */
static void
rl_policy_warn(RlFailure *failure, RlFailureMode mode)
{
	TimestampTz now;
	char		detail[600];
	uint64		fresh = failure->events - failure->seen;
	bool		full = failure->reason == RL_FAILED_FULL;

	if (fresh == 0)
		return;
	failure->seen = failure->events;
	now = GetCurrentTimestamp();
	if (failure->last_warning != 0 &&
		!TimestampDifferenceExceeds(failure->last_warning, now,
									full ? RL_WARN_FULL_INTERVAL_MS : RL_WARN_INTERVAL_MS))
	{
		failure->unwarned += fresh;
		return;
	}
	rl_policy_detail(failure, detail, sizeof(detail));
	if (full)
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("%s is full; %s", failure->setting,
						rl_policy_words(failure, mode)),
				 errdetail_internal("%s", detail),
				 failure->unwarned > 0 ?
				 errhint("%lld further refusals were not reported. Raise %s (a restart is needed).",
						 (long long) failure->unwarned, failure->setting) :
				 errhint("Raise %s (a restart is needed).", failure->setting)));
	else
		ereport(WARNING,
				(failure->setting != NULL ?
				 errcode(ERRCODE_CONFIG_FILE_ERROR) :
				 errcode(ERRCODE_CONNECTION_FAILURE),
				 failure->setting != NULL ?
				 errmsg("ratelimit cannot use %s: check %s; %s",
						failure->subject, failure->setting,
						rl_policy_words(failure, mode)) :
				 errmsg("%s is unavailable; %s", failure->subject,
						rl_policy_words(failure, mode)),
				 errdetail_internal("%s", detail),
				 failure->unwarned > 0 ?
				 errhint("%lld further failures were not reported; see rl_status().",
						 (long long) failure->unwarned) : 0));
	failure->last_warning = now;
	failure->unwarned = fresh - 1;
}

/* failure_mode = error: the call fails, saying why. */
static void
rl_policy_raise(const RlFailure *failure, bool by_policy)
{
	char		detail[600];

	rl_policy_detail(failure, detail, sizeof(detail));
	if (failure->reason == RL_FAILED_FULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("%s is full", failure->setting),
				 errdetail_internal("%s", detail),
				 errhint("Raise %s (a restart is needed).", failure->setting)));
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("%s is unavailable", failure->subject),
			 errdetail_internal("%s", detail),
			 by_policy ?
			 errhint("The policy's failure_mode is \"error\"; set it to \"open\" or \"closed\" in rl_policies to answer without Redis.") :
			 errhint("ratelimit.failure_mode is \"error\"; set it to \"open\" or \"closed\" to answer without Redis.")));
}

/*
 * The answer of a check nobody could answer: open admits, closed denies
 * until the store's next attempt (retry_at, of the first store asked).
 */
static void
rl_policy_fixed(RlCheck *check, TimestampTz retry_at)
{
	RlAnswer   *answer = &check->answer;

	answer->known = false;
	answer->remaining = 0;
	answer->reset_after_ms = 0;
	check->tightest = -1;
	if (check->failure_mode == RL_FAIL_OPEN)
	{
		rl_counters.fail_open++;
		answer->allowed = true;
		answer->retry_after_ms = 0;
		return;
	}
	rl_counters.fail_closed++;
	answer->allowed = false;
	answer->retry_after_ms = 1;
	if (retry_at != 0)
		answer->retry_after_ms =
			Max(1, TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
												   retry_at));
}

/*
 * Answers the checks store left unanswered (those with answered false),
 * as ratelimit.failure_mode says; under "error" raises.
 */
void
rl_policy_answer(const RlStoreOps *store, RlCheck *checks, int n)
{
	TimestampTz *retry_at = palloc(sizeof(TimestampTz) * n);
	RlCheck    *local = NULL;
	int		   *which = NULL;
	int			m = 0;

	/* Every source's failures first: the WARNING comes before an ERROR. */
	for (int i = 0; i < n; i++)
	{
		if (checks[i].answered)
			continue;
		rl_policy_warn(checks[i].failure, checks[i].failure_mode);
		retry_at[i] = checks[i].failure->retry_at;
	}
	for (int i = 0; i < n; i++)
	{
		if (!checks[i].answered && checks[i].failure_mode == RL_FAIL_ERROR)
		{
			rl_stats_policy_error(&checks[i]);
			rl_policy_raise(checks[i].failure,
							rl_failure_mode != RL_FAIL_ERROR);
		}
	}

	/* failure_mode = local: what Redis left, the local store answers. */
	if (store != &rl_local_store)
	{
		local = palloc(sizeof(RlCheck) * n);
		which = palloc(sizeof(int) * n);
		for (int i = 0; i < n; i++)
		{
			if (checks[i].answered || checks[i].failure_mode != RL_FAIL_LOCAL)
				continue;
			local[m] = checks[i];
			which[m++] = i;
		}
		if (m > 0)
			rl_local_store.check(local, m, NULL);
		for (int k = 0; k < m; k++)
		{
			if (!local[k].answered)
			{
				rl_policy_warn(local[k].failure, local[k].failure_mode);
				continue;
			}
			rl_counters.fail_local++;
			local[k].failed_over = true;
			checks[which[k]] = local[k];
		}
	}

	for (int i = 0; i < n; i++)
	{
		if (checks[i].answered)
			continue;
		rl_policy_fixed(&checks[i], retry_at[i]);
		checks[i].answered = true;
	}
}

/*
 * rl_reset's rule: forgets the keys in store, and when local
 * (failure_mode = local, the server's or a key's policy's) in the local
 * store too, so that a reset also holds while Redis is away.  A store
 * that cannot is an ERROR whatever the mode: a reset is administrative,
 * and a caller must not believe a limiter forgotten.  True if any key
 * had state in store.
 */
bool
rl_policy_remove(const RlStoreOps *store, char **keys, int n, bool local)
{
	RlFailure  *failure = NULL;
	bool		existed = false;
	bool		local_existed = false;
	char		detail[600];

	if (local && store != &rl_local_store)
		(void) rl_local_store.remove(keys, n, &local_existed, &failure);
	if (store->remove(keys, n, &existed, &failure))
		return existed;
	rl_policy_warn(failure, rl_failure_mode);
	rl_policy_detail(failure, detail, sizeof(detail));
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("%s is unavailable", failure->subject),
			 errdetail_internal("%s", detail)));
	return false;				/* keep compiler quiet */
}

/*
 * Refunds of aborted work (and concurrency slots at a transaction's end)
 * that could not be given back: counted by the caller, warned of here
 * like a failure of a store, the first at once, then at most once a
 * minute, the next one telling how many were lost meanwhile.  what is the
 * store's words for RL_LOST_STORE (no key or secret).
 */
void
rl_policy_refunds_lost(int64 n, RlLostCause cause, const char *what)
{
	static TimestampTz last_warning = 0;
	static int64 unwarned = 0;
	TimestampTz now = GetCurrentTimestamp();
	int64		all;

	if (last_warning != 0 &&
		!TimestampDifferenceExceeds(last_warning, now, RL_WARN_INTERVAL_MS))
	{
		unwarned += n;
		return;
	}
	all = n + unwarned;
	ereport(WARNING,
			(errcode(cause == RL_LOST_STORE ? ERRCODE_CONNECTION_FAILURE :
					 cause == RL_LOST_MEMORY ? ERRCODE_OUT_OF_MEMORY :
					 cause == RL_LOST_TOO_MANY ? ERRCODE_CONFIGURATION_LIMIT_EXCEEDED :
					 ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg_plural("ratelimit could not give back " INT64_FORMAT " refund or concurrency slot",
						   "ratelimit could not give back " INT64_FORMAT " refunds or concurrency slots",
						   all, all),
			 cause == RL_LOST_STORE ?
			 errdetail("The store could not deliver them: %s. The limiters keep what those checks took until it expires; a refund is never sent twice.",
					   what != NULL ? what : "no reply") :
			 cause == RL_LOST_MEMORY ?
			 errdetail("There was no memory left to send them. The limiters keep what those checks took until it expires.") :
			 cause == RL_LOST_TOO_MANY ?
			 errdetail("The transaction made more checks that refund than one transaction keeps (1048576). The limiters keep what the others took until it expires.") :
			 errdetail("An error was raised while they were sent. The limiters keep what those checks took until it expires; a refund is never sent twice."),
			 unwarned > 0 ?
			 errhint(INT64_FORMAT " of them were lost since the last such warning, which is given at most once a minute.",
					 unwarned) : 0));
	last_warning = now;
	unwarned = 0;
}
