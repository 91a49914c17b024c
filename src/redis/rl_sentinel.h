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

/* Settings (rl_guc.c). */

/* What keeps the Redis password from a master that is not ours. */
typedef enum RlSentinelGuard
{
	RL_GUARD_UNNEEDED,			/* no Redis password to keep */
	RL_GUARD_TLS,				/* TLS verifies the master: our CA or name */
	RL_GUARD_SENTINEL_AUTH,		/* the Sentinels require a password */
	RL_GUARD_MISSING			/* neither: sentinel mode is refused */
} RlSentinelGuard;

extern bool rl_sentinel_check(void);
extern RlSentinelGuard rl_sentinel_guard(void);
extern bool rl_sentinel_guarded(void);
extern void rl_sentinel_refuse_open(void);
extern bool rl_sentinel_confirm_role(RlNode *master);
extern void rl_sentinel_mark_stale(void);
extern void rl_sentinel_reset(void);
extern const char *rl_sentinel_reply_setting(const char *reply);
extern const char *rl_sentinel_endpoint(void);

#endif							/* RL_SENTINEL_H */
