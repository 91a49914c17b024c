/*-------------------------------------------------------------------------
 *
 * rl_types.h
 *	  The types every layer of the ratelimit extension shares: algorithms,
 *	  limiters, answers, failure reasons, counters, and the SQLSTATEs of
 *	  its own.  Types only: settings are in rl_guc.h, functions in each
 *	  layer's header (src/README.md).
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_types.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_TYPES_H
#define RL_TYPES_H

#include "datatype/timestamp.h"

#include "rl_compat.h"

/* Algorithms, in the order of the script table (src/gen_scripts.sh). */
typedef enum RlAlgorithm
{
	RL_FIXED_WINDOW,
	RL_SLIDING_LOG,
	RL_SLIDING_COUNTER,
	RL_TOKEN_BUCKET,
	RL_LEAKY_BUCKET,
	RL_GCRA,
	RL_CONCURRENCY,				/* 0.6.0: holders in flight (rl_refund.c) */
	RL_NUM_ALGORITHMS
} RlAlgorithm;

/*
 * Whether an algorithm keeps one entry per admitted call: the sliding log,
 * and concurrency, whose holders are a sliding log's entries released when
 * their transaction ends (or when their lease, the window, runs out).
 */
static inline bool
rl_algorithm_logs(RlAlgorithm algorithm)
{
	return algorithm == RL_SLIDING_LOG || algorithm == RL_CONCURRENCY;
}

/* Input caps (README, "Limits"). */
#define RL_MAX_KEY_BYTES	1024
#define RL_MAX_LIMIT		INT64CONST(1000000000)
#define RL_MAX_LOG_LIMIT	INT64CONST(100000)
#define RL_MIN_WINDOW_US	INT64CONST(1000)
#define RL_MAX_WINDOW_US	(INT64CONST(366) * USECS_PER_DAY)
/*
 * The scripts keep times in microseconds as Lua doubles, exact below 2^53
 * (about 9.007e15 us): a pinned clock plus the longest window must stay
 * below that.  8e12 ms is in the year 2223.
 */
#define RL_MAX_TEST_CLOCK_MS	8e12
#define RL_MAX_PROXY_HOPS	16
/* Redis servers one backend knows: the seeds of ratelimit.redis_nodes, the masters. */
#define RL_MAX_NODES		64

/* ratelimit.failure_mode */
typedef enum RlFailureMode
{
	RL_FAIL_OPEN,
	RL_FAIL_CLOSED,
	RL_FAIL_ERROR,
	RL_FAIL_LOCAL				/* answered by the local store */
} RlFailureMode;

/* ratelimit.engine: the store every check goes to */
typedef enum RlEngine
{
	RL_ENGINE_REDIS,
	RL_ENGINE_LOCAL
} RlEngine;

/* ratelimit.redis_mode */
typedef enum RlRedisMode
{
	RL_MODE_STANDALONE,
	RL_MODE_CLUSTER,
	RL_MODE_SENTINEL
} RlRedisMode;

/* One limiter: what a single rl_allow call checks. */
typedef struct RlLimiter
{
	RlAlgorithm algorithm;
	int64		limit;			/* the sustained rate: limit per window */
	int64		window_us;
	int64		burst;			/* capacity of the buckets and GCRA; 0: limit */

	/*
	 * A named policy's limiter (0.5.0): its state outlives a change of the
	 * policy's parameters, so the store keeps, beside the state, what it
	 * needs to carry it over (doc/policies.md).  False for the parameter
	 * forms, whose keys name their parameters.
	 */
	bool		carry;

	/*
	 * A named policy's per-policy settings (rl_policies.c), all zero for
	 * the parameter forms: name is the policy's (its store key is
	 * rl_redis_key's policy form); policy is the policy's slot in
	 * rl_stats_policies, from 1 (0: none, or not counted); shadow is the
	 * policy's enforce off; failure_mode is the policy's failure mode plus
	 * one (0: ratelimit.failure_mode).
	 */
	const char *name;
	int			policy;
	bool		shadow;
	int			failure_mode;

	/*
	 * Whether what a check took is given back when its transaction or
	 * subtransaction aborts (rl_refund.c): RL_REFUND_SERVER (0, the
	 * parameter forms) follows ratelimit.refund_on_abort; a policy sets
	 * its refund_on_abort, a trigger its option (default on).
	 */
	int			refund;
} RlLimiter;

#define RL_REFUND_SERVER	0
#define RL_REFUND_ON		1
#define RL_REFUND_OFF		2

/* The most one call can ask for: the burst where one is set, else the limit. */
static inline int64
rl_capacity(const RlLimiter *limiter)
{
	return limiter->burst > 0 ? limiter->burst : limiter->limit;
}

/*
 * What an admitted rule took, as its store recorded it, so that it can be
 * given back exactly when the work it admitted is rolled back (a refund,
 * lua/refund.lua): two whole numbers whose meaning is the algorithm's
 * (the window charged, or the sliding log's member; zero where the
 * algorithm needs only the cost).
 */
typedef struct RlReceipt
{
	int64		r1;
	int64		r2;
} RlReceipt;

/* The answer of one check, as rl_result reports it. */
typedef struct RlAnswer
{
	bool		allowed;
	bool		known;			/* false: Redis unavailable, policy answer */
	int64		remaining;
	int64		retry_after_ms;
	int64		reset_after_ms;
} RlAnswer;

/*
 * What rl_ping() reports of one server a store reached just now.  No
 * field ever holds a secret: the endpoint is host:port or the socket.
 */
typedef struct RlProbeRow
{
	const char *engine;			/* the store: "redis", "local" */
	const char *mode;			/* "standalone", "cluster", "sentinel"; NULL */
	char		endpoint[300];	/* "": none (the local store) */
	char		server[16];		/* the product, "redis", "valkey"; "": unknown */
	char		version[32];	/* that product's own version; "": unknown */
	double		rtt_ms;			/* the PING's round trip; < 0: none */
} RlProbeRow;

/*
 * Why a store left a check unanswered: one of a small fixed set, named by
 * the store where the failure happens and carried to the failure policy
 * and to rl_stats.failures_* as it is.
 */
typedef enum RlFailReason
{
	RL_FAILED_TIMEOUT,			/* no reply (or connection) in time */
	RL_FAILED_CONNECT,			/* the connection could not be opened */
	RL_FAILED_REFUSED,			/* Redis refused the connection (AUTH, max clients) */
	RL_FAILED_MISCONFIGURED,	/* a setting is wrong (password, database ...) */
	RL_FAILED_PROTOCOL,			/* a reply no command of ours can have */
	RL_FAILED_LOST,				/* the link broke mid-call */
	RL_FAILED_UNAVAILABLE,		/* Redis answered but cannot serve (BUSY, LOADING ...) */
	RL_NUM_FAIL_REASONS,
	/* Not Redis's: the local store's table is full (counted as a failure only). */
	RL_FAILED_FULL = RL_NUM_FAIL_REASONS
} RlFailReason;

/*
 * Counters of calls and of Redis work.  Every field is an int64 (rl_stats.c
 * sums them as an array).  They live in this backend's slot in shared
 * memory (rl_stats.c), written only by this backend, so that rl_stats can
 * sum every backend's; rl_status() shows what this backend added.
 */
typedef struct RlCounters
{
	int64		calls;
	int64		allowed;
	int64		denied;
	int64		fail_open;
	int64		fail_closed;
	int64		failures;
	int64		connects;
	int64		script_loads;
	int64		cached;			/* denials answered by the deny cache */
	int64		shadow_denied;	/* denials let through (ratelimit.enforce off) */
	int64		redirects;		/* cluster MOVED and ASK followed */
	int64		map_refreshes;	/* cluster slot maps fetched */
	int64		failed[RL_NUM_FAIL_REASONS];	/* failures by reason */

	int64		fail_local;		/* answered by the local engine for Redis */
	int64		refunds;		/* refunds of aborted work given back */
	int64		refunds_lost;	/* ... that could not be (rl_refund.c) */
} RlCounters;

/* SQLSTATE of a denial raised by the triggers; PostgREST answers 429. */
#define RL_ERRCODE_RATE_LIMITED	MAKE_SQLSTATE('P','T','4','2','9')
/* SQLSTATE through which PostgREST takes status and headers from an error. */
#define RL_ERRCODE_POSTGREST	MAKE_SQLSTATE('P','G','R','S','T')
/* SQLSTATE of a call naming a policy rl_policies does not have. */
#define RL_ERRCODE_NO_POLICY	MAKE_SQLSTATE('R','L','4','0','4')

/* A policy's name: 1 to this many bytes of [A-Za-z0-9_.:-]. */
#define RL_MAX_POLICY_NAME	63

#endif							/* RL_TYPES_H */
