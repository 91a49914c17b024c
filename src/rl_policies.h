/*-------------------------------------------------------------------------
 *
 * rl_policies.h
 *	  Named policies (0.5.0): the rl_policies table, read through a cache
 *	  in each backend.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_policies.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_POLICIES_H
#define RL_POLICIES_H

#include "rl_types.h"

/*
 * The limiter of the policy named by len bytes at name, into *limiter
 * (its name a copy in the current memory context); an ERROR with
 * SQLSTATE RL404 when rl_policies has no such policy.
 */
extern void rl_policy_get(const char *name, int len, RlLimiter *limiter);

/* The same for a text argument. */
extern void rl_policy_get_text(const struct varlena *name, RlLimiter *limiter);

#endif							/* RL_POLICIES_H */
