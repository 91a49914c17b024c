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
extern void rl_policy_refunds_lost(int64 n, const char *why);
extern bool rl_policy_remove(const RlStoreOps *store, char **keys, int n,
							 bool local);

#endif							/* RL_POLICY_H */
