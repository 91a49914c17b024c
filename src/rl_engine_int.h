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
#include "rl_store.h"

extern const RlStoreOps *rl_engine_store(void);
extern void rl_engine_ask(RlCheck *checks, int n, RlWaitWork work,
						  bool *cached);
extern void rl_engine_settle(RlCheck *checks, int n, const bool *cached,
							 bool remember);
extern void rl_engine_run(RlCheck *checks, int n, RlWaitWork work);

/* rl_refund.c: refunds of aborted work */
extern bool rl_refund_wanted(const RlCheck *check);
extern void rl_refund_keep(const RlCheck *check, const RlStoreOps *store);
extern int64 rl_refund_hold(const RlCheck *check, const RlStoreOps *store);
extern bool rl_refund_release(int64 holder);

#endif							/* RL_ENGINE_INT_H */
