/*-------------------------------------------------------------------------
 *
 * rl_sentinel.h
 *	  Redis Sentinel: finding the master and staying with it.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_sentinel.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_SENTINEL_H
#define RL_SENTINEL_H

#include "rl_conn.h"

extern bool rl_sentinel_check(void);
extern bool rl_sentinel_confirm_role(RlNode *master);
extern void rl_sentinel_reset(void);
extern void rl_sentinel_mark_stale(void);
extern const char *rl_sentinel_endpoint(void);

#endif							/* RL_SENTINEL_H */
