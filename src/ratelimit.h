/*-------------------------------------------------------------------------
 *
 * ratelimit.h
 *	  Declarations shared by the ratelimit extension's source files.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/ratelimit.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RATELIMIT_H
#define RATELIMIT_H

#include "fmgr.h"
#include "access/htup.h"
#include "utils/array.h"
#include "access/tupdesc.h"
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
	RL_NUM_ALGORITHMS
} RlAlgorithm;

/* Script table indexes: one per algorithm, then the layered script. */
#define RL_SCRIPT_LAYERED	RL_NUM_ALGORITHMS
#define RL_NUM_SCRIPTS		(RL_NUM_ALGORITHMS + 1)

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

/* ratelimit.failure_mode */
typedef enum RlFailureMode
{
	RL_FAIL_OPEN,
	RL_FAIL_CLOSED,
	RL_FAIL_ERROR,
	RL_FAIL_LOCAL				/* answered by the local engine (rl_local.h) */
} RlFailureMode;

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
} RlLimiter;

/* The most one call can ask for: the burst where one is set, else the limit. */
static inline int64
rl_capacity(const RlLimiter *limiter)
{
	return limiter->burst > 0 ? limiter->burst : limiter->limit;
}

/* The answer of one check, as rl_result reports it. */
typedef struct RlAnswer
{
	bool		allowed;
	bool		known;			/* false: Redis unavailable, policy answer */
	int64		remaining;
	int64		retry_after_ms;
	int64		reset_after_ms;
} RlAnswer;

/* rl_guc.c */
extern int	rl_redis_mode;
extern char *rl_redis_nodes;
extern char *rl_redis_host;
extern int	rl_redis_port;
extern char *rl_redis_socket;
extern int	rl_redis_db;
extern char *rl_redis_username;
extern char *rl_redis_password;
extern char *rl_redis_password_file;
extern bool rl_redis_tls;
extern char *rl_redis_tls_ca_file;
extern char *rl_redis_tls_cert_file;
extern char *rl_redis_tls_key_file;
extern char *rl_redis_tls_server_name;
extern int	rl_connect_timeout;
extern int	rl_command_timeout;
extern int	rl_failure_mode;
extern int	rl_retry_interval;
extern char *rl_key_prefix;
extern bool rl_isolate_databases;
extern bool rl_enforce;
extern bool rl_stats_enabled;
extern int	rl_stats_max_limiters;
extern int	rl_trusted_proxy_hops;
extern int	rl_ipv6_prefix;
extern double rl_test_clock_ms;
extern uint64 rl_settings_generation;
extern void rl_define_settings(void);

/* rl_args.c */
extern RlAlgorithm rl_parse_algorithm(text *algo);
extern const char *rl_algorithm_name(RlAlgorithm algorithm);
extern int64 rl_window_us(Interval *window);
extern void rl_check_limiter(const RlLimiter *limiter);
extern int64 rl_burst_arg(FunctionCallInfo fcinfo, int argno);
extern int64 rl_check_burst(int64 burst);
extern void rl_check_cost(int64 cost, const RlLimiter *limiter);
extern char *rl_check_key(text *key, int *len);
extern char *rl_redis_key(const char *key, int keylen, const RlLimiter *limiter);
extern const char *rl_clock_arg(void);
extern void rl_require_args(FunctionCallInfo fcinfo, int nargs);
extern Datum *rl_array_elements(ArrayType *arr, const char *what, int *n);

/*
 * Failures by reason (rl_stats.failures_*): one of a small fixed set,
 * read from the failure's own message by rl_stats_failure.
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
	RL_NUM_FAIL_REASONS
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
} RlCounters;

/* rl_stats.c: the backend's slot, found on first use. */
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

extern void rl_require_preload(void);

/* ratelimit.c: the SQL entry points rl_allow, rl_peek, rl_reset, rl_status */
extern bool rl_preloaded;
extern HeapTuple rl_answer_tuple(TupleDesc desc, const RlAnswer *answer);
extern bool rl_delete_keys(char **keys, int n);

/*
 * rl_engine.c: runs checks and applies the failure policy (rl_scripts.h
 * has its reply half, rl_take_answers and rl_policy_answer_for).
 * rl_check_rules checks several limiters, consumed all or nothing.
 */
extern void rl_check_many(const RlLimiter *limiter, char **keys, int *keylens,
						  const int64 *costs, int n, RlAnswer *answers);
extern int	rl_check_rules(char **redis_keys, const RlLimiter *limiters,
						   const int64 *costs, int n, RlAnswer *answer);
extern void rl_apply_enforce(RlAnswer *answers, int n);
extern void rl_policy_answer(RlAnswer *answer);
extern const char *rl_policy_words(void);

/* rl_postgrest.c: answers in the form PostgREST turns into HTTP */
extern bool rl_in_postgrest_request(void);
extern char *rl_window_text(int64 window_us);
extern rl_noreturn void rl_raise_postgrest(const char *message, const char *details,
										   const char *hint, const RlAnswer *answer,
										   const RlLimiter *limiter);

/* SQLSTATE of a denial raised by the triggers; PostgREST answers 429. */
#define RL_ERRCODE_RATE_LIMITED	MAKE_SQLSTATE('P','T','4','2','9')
/* SQLSTATE through which PostgREST takes status and headers from an error. */
#define RL_ERRCODE_POSTGREST	MAKE_SQLSTATE('P','G','R','S','T')

#endif							/* RATELIMIT_H */
