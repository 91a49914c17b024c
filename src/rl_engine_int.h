/*-------------------------------------------------------------------------
 *
 * rl_engine_int.h
 *	  Inside the engine only (rl_engine.c, rl_engine_spread.c): the steps
 *	  of one check, for a statement whose keys span a store's partitions.
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
extern int	rl_engine_spread(const RlStoreOps *store, char **keys,
							 const RlLimiter *limiter, const int64 *costs,
							 int n, int chunk, RlWaitWork work,
							 RlAnswer *answer);

#endif							/* RL_ENGINE_INT_H */
