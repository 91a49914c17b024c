/*-------------------------------------------------------------------------
 *
 * rl_engine.c
 *	  The engine: every check of the extension runs here.
 *
 * rl_allow, rl_peek, rl_allow_many, rl_acquire and rl_postgrest_guard
 * check each key against one limiter (rl_engine_check_keys); layered
 * rules and the row trigger check rules together (rl_engine_check_rules);
 * the statement trigger checks a statement's keys (rl_engine_check_
 * statement, in rl_engine_spread.c, which runs the same steps).
 * Each builds RlChecks (rl_store.h) and hands them to rl_engine_run,
 * which does, once, in this order:
 *
 *	1. the deny cache (rl_cache.c): a key it holds as denied is answered
 *	   at once, with no round trip;
 *	2. the store (ratelimit.engine: src/redis/ or src/local/) answers the
 *	   rest, or leaves some unanswered with the reason;
 *	3. the failure policy (rl_policy.c) answers what the store left;
 *	   what a store admitted for a limiter that refunds is kept, to be
 *	   given back if the work aborts (rl_refund.c);
 *	4. the counters (rl_status, rl_stats), the statistics per limiter of a
 *	   denial (rl_stats_limiters) and the deny cache's new entries;
 *	5. shadow mode (ratelimit.enforce off, or the check's policies'
 *	   enforce false): a denial is let through.
 *
 * A named policy's limiter (rl_policies.c) carries its policy's enforce
 * and failure_mode, which steps 3 and 5 obey per check (RlCheck), and
 * its slot in rl_stats_policies, which step 4 counts.
 *
 * No entry point reads ratelimit.engine or redis_mode: the store is
 * chosen here, and its topology is its own (RlStoreOps.partition).
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_engine.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/guc.h"

#include "rl_args.h"
#include "rl_cache.h"
#include "rl_engine_int.h"
#include "rl_policy.h"
#include "rl_stats.h"

/*
 * The steps below are written once, as always-inline functions, and the
 * extern entry points (rl_engine_int.h, for rl_engine_spread.c) wrap
 * them: a shared library's extern functions are not inlined into each
 * other, and a single check on the local engine, a few thousand
 * instructions, would otherwise pay a call and return per step.
 */

/* The store of every check, by ratelimit.engine. */
static pg_attribute_always_inline const RlStoreOps *
rl_store_of_engine(void)
{
	return rl_engine == RL_ENGINE_LOCAL ? &rl_local_store : &rl_redis_store;
}

const RlStoreOps *
rl_engine_store(void)
{
	return rl_store_of_engine();
}

/* A check of one key, which the deny cache may answer and remember. */
static inline bool
rl_engine_cacheable(const RlCheck *check)
{
	/*
	 * A concurrency limit's denial lasts until a holder's release, which
	 * comes before the wait it reports: not one to remember.
	 */
	return check->nrules == 1 && !check->check_only &&
		check->limiters[0].algorithm != RL_CONCURRENCY;
}

/*
 * Whether a check names a policy, whose statistics (rl_stats_policies)
 * count it: asked inline, as nearly no check does.  A rule after the
 * first is looked at only when the first names none.
 */
static inline bool
rl_engine_has_policy(const RlCheck *check)
{
	if (check->limiters[0].name != NULL)
		return true;
	for (int i = 1; !check->uniform && i < check->nrules; i++)
	{
		if (check->limiters[i].name != NULL)
			return true;
	}
	return false;
}

/*
 * Steps 1 to 3: every check answered, by the deny cache (cached[i] set),
 * the store, or the failure policy.  Nothing is counted yet but what the
 * policy counts of its own answers.
 */
static pg_attribute_always_inline void
rl_ask(RlCheck *checks, int n, RlWaitWork work, bool *cached)
{
	const RlStoreOps *store = rl_store_of_engine();
	RlCheck    *ask = checks;
	int		   *which = NULL;
	int			m = 0;
	bool		unanswered = false;

	for (int i = 0; i < n; i++)
	{
		RlCheck    *c = &checks[i];

		c->answered = false;
		c->failure = NULL;
		c->tightest = 0;
		c->failed_over = false;
		cached[i] = rl_deny_cache && rl_engine_cacheable(c) &&
			rl_cache_lookup(c->keys[0], &c->limiters[0], c->costs[0],
							&c->answer);
		c->answered = cached[i];
		c->receipts = !cached[i] && rl_refund_wanted(c) ?
			palloc0(sizeof(RlReceipt) * c->nrules) : NULL;
		m += !cached[i];
	}
	if (m == 0)
		return;

	/* The store gets the checks the cache left, side by side. */
	if (m < n)
	{
		ask = palloc(sizeof(RlCheck) * m);
		which = palloc(sizeof(int) * m);
		m = 0;
		for (int i = 0; i < n; i++)
		{
			if (cached[i])
				continue;
			ask[m] = checks[i];
			which[m++] = i;
		}
	}
	store->check(ask, m, work);
	for (int k = 0; k < m; k++)
	{
		/* Read only by the failure policy: worked out when it is needed. */
		if (!ask[k].answered)
		{
			ask[k].failure_mode = rl_check_failure_mode(&ask[k],
														rl_failure_mode);
			unanswered = true;
		}
	}
	if (unanswered)
		rl_policy_answer(store, ask, m);

	/* What a store admitted, kept to be given back if the work aborts. */
	for (int k = 0; k < m; k++)
	{
		RlCheck    *c = &ask[k];

		if (c->receipts == NULL || !c->answer.known || !c->answer.allowed)
			continue;
		if (c->hold)
			c->holder = rl_refund_hold(c, c->failed_over ? &rl_local_store : store);
		else
			rl_refund_keep(c, c->failed_over ? &rl_local_store : store);
	}
	if (ask != checks)
	{
		for (int k = 0; k < m; k++)
			checks[which[k]] = ask[k];
	}
}

void
rl_engine_ask(RlCheck *checks, int n, RlWaitWork work, bool *cached)
{
	rl_ask(checks, n, work, cached);
}

/*
 * Steps 4 and 5 for answered checks: allowed and denied counted (an
 * answer of the policy is counted by it), a denial recorded for
 * rl_stats_limiters under the rule that decided it and, when remember,
 * in the deny cache; then shadow mode.
 */
static pg_attribute_always_inline void
rl_settle(RlCheck *checks, int n, const bool *cached, bool remember)
{
	uint64		epoch = remember && rl_deny_cache ? rl_cache_epoch() : 0;

	for (int i = 0; i < n; i++)
	{
		RlCheck    *c = &checks[i];
		RlAnswer   *a = &c->answer;

		bool		shadow;

		if (cached != NULL && cached[i])
		{
			rl_counters.cached++;
			rl_counters.denied++;
			rl_stats_denied(c->keys[0], c->limiters[0].algorithm);
		}
		else if (a->known && a->allowed)
			rl_counters.allowed++;
		else if (a->known)
		{
			int			t = Max(c->tightest, 0);

			rl_counters.denied++;
			rl_stats_denied(c->keys[t], rl_check_limiter_of(c, t)->algorithm);
			if (remember && rl_engine_cacheable(c))
				rl_cache_remember(c->keys[0], &c->limiters[0], c->costs[0],
								  a, epoch);
		}

		/*
		 * Shadow mode: the check ran and was counted as usual, but the
		 * caller is let through, with nothing to wait for; remaining and
		 * reset_after_ms stay the store's, to tell how close the key is.
		 */
		shadow = !a->allowed && rl_check_shadow(c, rl_enforce);
		if (rl_engine_has_policy(c))
			rl_stats_policy_check(c, shadow);
		if (shadow)
		{
			rl_counters.shadow_denied++;
			a->allowed = true;
			a->retry_after_ms = 0;
		}
	}
}

void
rl_engine_settle(RlCheck *checks, int n, const bool *cached, bool remember)
{
	rl_settle(checks, n, cached, remember);
}

/* Steps 1 to 5, for checks that each stand alone. */
static pg_attribute_always_inline void
rl_run(RlCheck *checks, int n, RlWaitWork work)
{
	bool		one;
	bool	   *cached = n == 1 ? &one : palloc(sizeof(bool) * n);

	rl_ask(checks, n, work, cached);
	rl_settle(checks, n, cached, true);
	if (cached != &one)
		pfree(cached);
}

void
rl_engine_run(RlCheck *checks, int n, RlWaitWork work)
{
	rl_run(checks, n, work);
}

/*
 * Checks n keys against one limiter, each its own check, in one round
 * trip (per node).  answers[i] is key i's.  A single check (rl_allow,
 * nearly every call) keeps its arrays on the stack.
 */
void
rl_engine_check_keys(const RlLimiter *limiter, char **keys, int *keylens,
					 const int64 *costs, int n, RlAnswer *answers)
{
	RlCheck		one;
	char	   *onekey;
	char		keybuf[512];
	RlCheck    *checks = n == 1 ? &one : palloc(sizeof(RlCheck) * n);
	char	  **rkeys = n == 1 ? &onekey : palloc(sizeof(char *) * n);

	rl_counters.calls += n;
	for (int i = 0; i < n; i++)
	{
		RlCheck    *c = &checks[i];

		rkeys[i] = n == 1 ?
			rl_redis_key_in(keybuf, sizeof(keybuf), keys[i], keylens[i],
							limiter) :
			rl_redis_key(keys[i], keylens[i], limiter);
		c->nrules = 1;
		c->keys = &rkeys[i];
		c->limiters = limiter;
		c->costs = &costs[i];
		c->uniform = true;
		c->rules = false;
		c->check_only = false;
		c->receipts = NULL;
		c->hold = false;
	}
	rl_run(checks, n, NULL);
	for (int i = 0; i < n; i++)
	{
		answers[i] = checks[i].answer;
		if (rkeys[i] != keybuf)
			pfree(rkeys[i]);
	}
	if (n != 1)
	{
		pfree(rkeys);
		pfree(checks);
	}
}

/*
 * rl_hold: a concurrency slot of key held for the session, released by
 * rl_engine_release or at the backend's exit (or at its lease's end).
 * Returns the holder, 0 when the check was not admitted by a store.
 */
int64
rl_engine_hold(const RlLimiter *limiter, char *key, int keylen, int64 cost,
			   RlAnswer *answer)
{
	RlCheck		c = {0};
	char	   *rkey = rl_redis_key(key, keylen, limiter);

	Assert(limiter->algorithm == RL_CONCURRENCY);
	c.nrules = 1;
	c.keys = &rkey;
	c.limiters = limiter;
	c.costs = &cost;
	c.uniform = true;
	c.hold = true;
	rl_counters.calls++;
	rl_engine_run(&c, 1, NULL);
	*answer = c.answer;
	return answer->allowed ? c.holder : 0;
}

/* rl_release: gives a session's hold back; false if it holds no such. */
bool
rl_engine_release(int64 holder)
{
	return rl_refund_release(holder);
}

/*
 * Checks n rules together, each a store key, a limiter and a cost: all
 * consumed or none.  Returns the rule that decided (the tightest when
 * admitted, the one with the longest wait when denied), or -1 when the
 * failure policy answered.
 */
int
rl_engine_check_rules(char **store_keys, const RlLimiter *limiters,
					  const int64 *costs, int n, RlAnswer *answer)
{
	RlCheck		c = {0};

	c.nrules = n;
	c.keys = store_keys;
	c.limiters = limiters;
	c.costs = costs;
	c.rules = true;
	/* One limiter for every key (a statement's chunk): sent once. */
	c.uniform = n > 1;
	for (int i = 1; i < n && c.uniform; i++)
		c.uniform = limiters[i].algorithm == limiters[0].algorithm &&
			limiters[i].limit == limiters[0].limit &&
			limiters[i].window_us == limiters[0].window_us &&
			limiters[i].burst == limiters[0].burst &&
			limiters[i].name == limiters[0].name &&
			limiters[i].policy == limiters[0].policy &&
			limiters[i].shadow == limiters[0].shadow &&
			limiters[i].failure_mode == limiters[0].failure_mode &&
			limiters[i].carry == limiters[0].carry &&
			limiters[i].refund == limiters[0].refund;
	rl_counters.calls++;
	rl_engine_run(&c, 1, NULL);
	*answer = c.answer;
	return c.tightest;
}

/*
 * A check its caller refused without asking the store (a statement's key
 * whose rows cost more than any window holds, in shadow mode): counted
 * and recorded as any denial.
 */
void
rl_engine_count_refusal(char *store_key, const RlLimiter *limiter)
{
	RlCheck		c = {0};
	int64		cost = 0;

	c.nrules = 1;
	c.keys = &store_key;
	c.limiters = limiter;
	c.costs = &cost;
	c.rules = true;
	c.answered = true;
	c.answer.known = true;
	c.answer.allowed = false;
	rl_counters.calls++;
	rl_engine_settle(&c, 1, NULL, false);
}

/*
 * Forgets limiters' state (rl_reset, rl_reset_layered) under the failure
 * policy's rule for resets; limiters[i] is store_keys[i]'s.  Every backend's cached denials are dropped,
 * whatever the outcome.
 */
bool
rl_engine_reset(char **store_keys, const RlLimiter *limiters, int n)
{
	bool		existed = false;
	bool		local = rl_failure_mode == RL_FAIL_LOCAL;

	/* A policy answered by the local store has a copy there too. */
	for (int i = 0; i < n && !local; i++)
		local = limiters[i].failure_mode == RL_FAIL_LOCAL + 1;
	PG_TRY();
	{
		existed = rl_policy_remove(rl_engine_store(), store_keys, n, local);
	}
	PG_FINALLY();
	{
		rl_cache_invalidate();
	}
	PG_END_TRY();
	return existed;
}

/* rl_status(): this backend's view of Redis, whatever the engine. */
void
rl_engine_status(const char **endpoint, bool *connected, const char **server,
				 const char **last_error, TimestampTz *last_error_at)
{
	RlStoreStatus status = {0};

	rl_redis_store.status(&status);
	*endpoint = status.endpoint;
	*connected = status.connected;
	*server = status.server;
	*last_error = status.last_error;
	*last_error_at = status.last_error_at;
}

/*
 * rl_ping(): the store of ratelimit.engine connects now and has each of
 * its servers answer.  A server that cannot be used is an ERROR naming
 * it, what failed and the setting to fix: this is the check that fails
 * loudly, so the failure policy does not answer it.  SQLSTATE 08001
 * before a link was open, 08004 when the server refused the client,
 * 08006 when an open link broke or stalled.
 */
int
rl_engine_probe(RlProbeRow *rows, int max)
{
	RlProbeFailure failure;
	int			n;
	const char *mode;

	memset(&failure, 0, sizeof(failure));
	n = rl_engine_store()->probe(rows, max, &failure);
	if (n >= 0)
		return n;
	mode = GetConfigOption("ratelimit.failure_mode", false, false);
	ereport(ERROR,
			(errcode(failure.reason == RL_FAILED_REFUSED ?
					 ERRCODE_SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION :
					 failure.linked ? ERRCODE_CONNECTION_FAILURE :
					 ERRCODE_SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION),
			 errmsg("ratelimit cannot use %s: %s", failure.subject,
					failure.what),
			 errdetail("%s%sUntil it can, checks get the answer of ratelimit.failure_mode (\"%s\").",
					   failure.detail,
					   failure.detail[0] != '\0' ? " " : "",
					   mode != NULL ? mode : "open"),
			 errhint("%s", failure.hint)));
	return 0;					/* keep compiler quiet */
}

/* _PG_init, preloaded: each store's shared memory and hooks. */
void
rl_engine_init(void)
{
	if (rl_local_store.init != NULL)
		rl_local_store.init();
	if (rl_redis_store.init != NULL)
		rl_redis_store.init();
}
