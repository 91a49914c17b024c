/*-------------------------------------------------------------------------
 *
 * rl_store.h
 *	  The interface between the engine and the stores that answer checks.
 *
 * A store keeps limiters' state and answers checks against it: the Redis
 * store (src/redis/) runs the Lua scripts on a server, the local store
 * (src/local/) runs the same algorithms in this server's shared memory.
 * Each fills a table of operations, as hiredis's redisContextFuncs or
 * TimescaleDB's ConnOps do, and the engine (rl_engine.c) calls them
 * through it; nothing else does, but the failure policy, which asks the
 * local store for what Redis left unanswered (failure_mode = local).
 *
 * A store answers each check, or leaves it unanswered with a pointer to
 * an RlFailure that says why, typed, and when the store will try again.
 * It never calls up: it does not know the failure policy, the deny
 * cache, the counters of calls or shadow mode.  Answers cross as answers
 * (RlAnswer), never as a store's own replies.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_store.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_STORE_H
#define RL_STORE_H

#include "rl_types.h"

/*
 * Why a store could not answer, kept by the store for the source of the
 * failure (a Redis node, the local table) and handed to the failure
 * policy with every check it leaves unanswered.  The store writes the
 * first part when a failure happens; the policy keeps its warnings' rate
 * in the second, so the store need not call it.
 */
typedef struct RlFailure
{
	/* Written by the store. */
	RlFailReason reason;
	const char *setting;		/* misconfigured or full: the setting to fix */
	bool		log_full;		/* full: the sliding logs' pool, not the table */
	char		subject[300];	/* "Redis server host:port", or the setting */
	char		what[512];		/* the detail: what happened, no key or secret */
	TimestampTz retry_at;		/* the store tries again then (0: at once) */
	uint64		events;			/* failures recorded here so far */

	/* Kept by the failure policy (rl_policy.c). */
	uint64		seen;			/* events warned of or counted unwarned */
	TimestampTz last_warning;
	int64		unwarned;
} RlFailure;

/* A success ends a run of failures: the next one is warned of at once. */
static inline void
rl_failure_recovered(RlFailure *failure)
{
	failure->last_warning = 0;
	failure->unwarned = 0;
}

/*
 * One check: its rules are checked and consumed together, all or
 * nothing.  A check of one limiter (rl_allow) has one rule and rules
 * false; layered rules, the triggers and a statement's chunks have rules
 * true (lua/layered.lua's semantics: a rule asked for nothing admits).
 */
typedef struct RlCheck
{
	int			nrules;
	char	  **keys;			/* each rule's store key (rl_redis_key) */
	const RlLimiter *limiters;	/* each rule's, or one for all (uniform) */
	const int64 *costs;
	bool		uniform;
	bool		rules;
	bool		check_only;		/* consume nothing (uniform rules only) */

	/*
	 * What the failure policy answers it with when the store cannot: the
	 * policies' failure_mode, else ratelimit.failure_mode (set by the
	 * engine from the limiters: rl_check_failure_mode).
	 */
	RlFailureMode failure_mode;
	bool		failed_over;	/* answered by the local store for Redis */

	/* The store's answer. */
	bool		answered;
	RlAnswer	answer;
	int			tightest;		/* the rule that decided, from 0 */
	RlFailure  *failure;		/* unanswered: why */

	/*
	 * NULL, or one per rule, filled by the store when it admits the check
	 * (a rule that consumed nothing: zeros): what the engine needs to give
	 * the cost back if the transaction aborts (rl_refund.c).
	 */
	RlReceipt  *receipts;

	/*
	 * A session's hold (rl_hold): its concurrency slot outlives the
	 * transaction, kept by rl_refund.c under holder until rl_release or
	 * the backend's exit.
	 */
	bool		hold;
	int64		holder;
} RlCheck;

/*
 * One admitted rule to give back: its store key, limiter, cost and
 * receipt.  The store sets done when the refund was delivered (whether or
 * not the state still held anything to give back).
 */
typedef struct RlRefund
{
	const char *key;
	RlLimiter	limiter;
	int64		cost;
	RlReceipt	receipt;
	bool		done;
} RlRefund;

static inline const RlLimiter *
rl_check_limiter_of(const RlCheck *check, int rule)
{
	return check->uniform ? &check->limiters[0] : &check->limiters[rule];
}

/*
 * The failure mode of a check: its policies' (RlLimiter.failure_mode),
 * the strictest when its rules' policies differ (error, then closed,
 * local, open), a rule of no policy counting as ratelimit.failure_mode.
 */
static inline RlFailureMode
rl_check_failure_mode(const RlCheck *check, int server_mode)
{
	static const int strictness[] = {0, 2, 3, 1};	/* open closed error local */
	int			n = check->uniform ? 1 : check->nrules;
	int			mode = -1;

	for (int i = 0; i < n; i++)
	{
		int			m = check->limiters[i].failure_mode > 0 ?
			check->limiters[i].failure_mode - 1 : server_mode;

		if (mode < 0 || strictness[m] > strictness[mode])
			mode = m;
	}
	return mode < 0 ? (RlFailureMode) server_mode : (RlFailureMode) mode;
}

/*
 * Whether a check's denial is let through: ratelimit.enforce off, or
 * every rule's policy in shadow mode (enforce false).  A rule of no
 * policy, or of an enforced one, keeps the check enforced.
 */
static inline bool
rl_check_shadow(const RlCheck *check, bool server_enforce)
{
	int			n = check->uniform ? 1 : check->nrules;

	if (!server_enforce)
		return true;
	for (int i = 0; i < n; i++)
	{
		if (!check->limiters[i].shadow)
			return false;
	}
	return n > 0;
}

/* Work to do while a store waits on the network (the trigger's WAL flush). */
typedef void (*RlWaitWork) (void);

/* What rl_status() shows of a store. */
typedef struct RlStoreStatus
{
	const char *endpoint;
	bool		connected;
	const char *server;			/* product and version, NULL if unknown */
	const char *last_error;		/* NULL: none */
	TimestampTz last_error_at;
} RlStoreStatus;

/*
 * Why a store's probe (rl_ping) failed: the server, what happened and
 * whether the link was open by then, with the hint that names what to
 * fix.  Filled by the store; the engine raises it as an ERROR.  No key
 * or secret in any field.
 */
typedef struct RlProbeFailure
{
	RlFailReason reason;
	bool		linked;			/* the connection was open: it broke or stalled */
	char		subject[300];	/* "Redis server host:port" */
	char		what[512];		/* what happened */
	char		detail[300];	/* more, or "" */
	char		hint[400];		/* the setting to fix, or what to check */
} RlProbeFailure;

typedef struct RlStoreOps
{
	const char *name;

	/* At _PG_init, when preloaded: ask for shared memory, hooks. */
	void		(*init) (void);

	/* Answers checks[0..n-1], or leaves some unanswered (see above). */
	void		(*check) (RlCheck *checks, int n, RlWaitWork work);

	/*
	 * Forgets the keys' state; *existed tells whether any had one.  False
	 * when the store could not (*failure says why).
	 */
	bool		(*remove) (char **keys, int n, bool *existed,
						   RlFailure **failure);

	/*
	 * The partition of a key: checks of keys in different partitions
	 * cannot be one atomic script (Redis Cluster's hash slots).  -1 when
	 * the store has a single partition.
	 */
	int			(*partition) (const char *key);

	/* What rl_status() shows. */
	void		(*status) (RlStoreStatus *status);

	/*
	 * rl_ping(): connects now, whatever the retry interval, and has each
	 * server the store uses answer; rows[0..return) are theirs (at most
	 * max).  -1 when one could not: *failure says which and why.  No
	 * failure policy: this is the check that fails loudly.
	 */
	int			(*probe) (RlProbeRow *rows, int max, RlProbeFailure *failure);

	/*
	 * Gives back what admitted rules took (their transaction aborted):
	 * one round trip per node, with the command timeout.  Sets done on
	 * each refund delivered; one that could not be is left undone and
	 * never sent again, and the failure that kept it is returned (NULL:
	 * none).  Runs while a transaction aborts: the caller (rl_refund.c)
	 * guards against an ERROR, but a store should raise none.
	 */
	RlFailure  *(*refund) (RlRefund *refunds, int n);
} RlStoreOps;

extern const RlStoreOps rl_redis_store;	/* src/redis/rl_redis.c */
extern const RlStoreOps rl_local_store;	/* src/local/rl_local_run.c */

#endif							/* RL_STORE_H */
