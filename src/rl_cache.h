/*-------------------------------------------------------------------------
 *
 * rl_cache.h
 *	  The local over-limit cache.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_cache.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_CACHE_H
#define RL_CACHE_H

#include "rl_guc.h"


extern void rl_cache_init(void);
extern uint64 rl_cache_epoch(void);
extern void rl_cache_invalidate(void);
extern bool rl_cache_lookup(const char *rkey, const RlLimiter *limiter,
							int64 cost, RlAnswer *answer);
extern void rl_cache_remember(const char *rkey, const RlLimiter *limiter,
							  int64 cost, const RlAnswer *answer,
							  uint64 epoch);

#endif							/* RL_CACHE_H */
