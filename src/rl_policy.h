/*-------------------------------------------------------------------------
 *
 * rl_policy.h
 *	  The failure policy: what a check is answered when its store cannot.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_policy.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_POLICY_H
#define RL_POLICY_H

#include "rl_store.h"

extern void rl_policy_answer(const RlStoreOps *store, RlCheck *checks, int n);
/* Why refunds of aborted work (or concurrency releases) were lost. */
typedef enum RlLostCause
{
	RL_LOST_STORE,				/* the store could not deliver: what says why */
	RL_LOST_ERROR,				/* an ERROR was raised while sending them */
	RL_LOST_MEMORY,				/* out of memory in the abort */
	RL_LOST_TOO_MANY			/* more than one transaction keeps */
} RlLostCause;

extern void rl_policy_refunds_lost(int64 n, RlLostCause cause,
								   const char *what);
extern bool rl_policy_remove(const RlStoreOps *store, char **keys, int n,
							 bool local);

#endif							/* RL_POLICY_H */
