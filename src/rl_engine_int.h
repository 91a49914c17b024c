/*-------------------------------------------------------------------------
 *
 * rl_engine_int.h
 *	  Inside the engine only (rl_engine.c, rl_engine_spread.c): the steps
 *	  of a check, which rl_engine_spread.c runs for a statement's keys.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_engine_int.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_ENGINE_INT_H
#define RL_ENGINE_INT_H

#include "rl_engine.h"
#include "rl_guc.h"
#include "rl_store.h"

extern const RlStoreOps *rl_engine_store(void);
extern void rl_engine_ask(RlCheck *checks, int n, RlWaitWork work,
						  bool *cached);
extern void rl_engine_settle(RlCheck *checks, int n, const bool *cached,
							 bool remember);
extern void rl_engine_run(RlCheck *checks, int n, RlWaitWork work);

/* rl_refund.c: refunds of aborted work */
extern void rl_refund_keep(const RlCheck *check, const RlStoreOps *store);
extern int64 rl_refund_hold(const RlCheck *check, const RlStoreOps *store);
extern bool rl_refund_release(int64 holder);

/*
 * Whether a limiter's checks are given back when their work aborts (the
 * owner's choice: RlLimiter.refund, or ratelimit.refund_on_abort).
 */
static inline bool
rl_refunds(const RlLimiter *l)
{
	return l->refund == RL_REFUND_SERVER ? rl_refund_on_abort :
		l->refund == RL_REFUND_ON;
}

/*
 * Whether a check must bring back its receipts: one of its rules refunds,
 * or holds a concurrency slot, which is always released.  Inline: every
 * check asks.
 */
static inline bool
rl_refund_wanted(const RlCheck *check)
{
	int			n = check->uniform ? 1 : check->nrules;

	if (check->check_only)
		return false;
	for (int i = 0; i < n; i++)
	{
		if (rl_refunds(&check->limiters[i]) ||
			check->limiters[i].algorithm == RL_CONCURRENCY)
			return true;
	}
	return false;
}

#endif							/* RL_ENGINE_INT_H */
