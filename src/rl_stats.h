/*-------------------------------------------------------------------------
 *
 * rl_stats.h
 *	  Server-wide statistics: per-backend counters in shared memory, the
 *	  Redis round-trip histogram and the limiters denying most.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_stats.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_STATS_H
#define RL_STATS_H

#include "portability/instr_time.h"

#include "rl_guc.h"

/* The backend's slot of counters, found on first use. */
extern RlCounters *rl_my_counters;
extern void rl_stats_attach(void);

static inline RlCounters *
rl_counters_ptr(void)
{
	if (unlikely(rl_my_counters == NULL))
		rl_stats_attach();
	return rl_my_counters;
}

#define rl_counters (*rl_counters_ptr())

extern void rl_stats_init(void);
extern void rl_stats_backend_counters(RlCounters *out);
extern void rl_stats_failure(RlFailReason reason);
extern void rl_stats_rtt_start(instr_time *start);
extern void rl_stats_rtt_end(const instr_time *start);
extern void rl_stats_denied(const char *redis_key, RlAlgorithm algorithm);

/* Between rl_stats.c and rl_stats_limiters.c */
extern void rl_stats_require(void);
extern bool rl_stats_have_slot(void);
extern void rl_stats_limiters_request(void);
extern void rl_stats_limiters_startup(void);
extern void rl_stats_limiters_attach(void);
extern void rl_stats_limiters_counts(int64 *entries, int64 *evicted);
extern void rl_stats_limiters_reset(void);

/* Per named policy (rl_stats_policies.c) */
struct RlCheck;
extern int	rl_stats_policy_slot(const char *name);
extern void rl_stats_policy_check(const struct RlCheck *check, bool shadow);
extern void rl_stats_policy_error(const struct RlCheck *check);
extern void rl_stats_policies_request(void);
extern void rl_stats_policies_startup(void);
extern void rl_stats_policies_reset(void);

#endif							/* RL_STATS_H */
