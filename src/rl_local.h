/*-------------------------------------------------------------------------
 *
 * rl_local.h
 *	  The local engine: the limiters in this server's shared memory.
 *
 * With ratelimit.engine = local (or ratelimit.failure_mode = local while
 * Redis is unavailable) the script calls that every entry point builds
 * for Redis are run here instead, by C versions of the Lua scripts, and
 * answered with replies of the scripts' shape.  So batches, layered
 * rules, the triggers, the guard, the deny cache, shadow mode and the
 * failure policy are written once for both stores.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_local.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_LOCAL_H
#define RL_LOCAL_H

#include "rl_scripts.h"

/* ratelimit.engine */
typedef enum RlEngine
{
	RL_ENGINE_REDIS,
	RL_ENGINE_LOCAL
} RlEngine;

/* Locks, one per partition of the table (a key's hash picks its partition). */
#define RL_LOCAL_PARTITIONS		128
/* Keys up to this many bytes are kept whole; longer ones by two hashes. */
#define RL_LOCAL_KEY_INLINE		128
/*
 * The sliding log's largest limit on the local engine, and its ring.  An
 * admitted call finds at most limit - 1 members in the window (each cost
 * is at least 1) and drops the older ones, up to 64 of them, as the
 * script does: with 64 or fewer older ones the ring then holds at most
 * limit members, with more it shrinks by 63.  So it never holds more
 * than RL_LOCAL_LOG_MAX_LIMIT members.
 */
#define RL_LOCAL_LOG_MAX_LIMIT	128
#define RL_LOCAL_LOG_CAP		RL_LOCAL_LOG_MAX_LIMIT
StaticAssertDecl(RL_LOCAL_LOG_MAX_LIMIT <= PG_UINT16_MAX,
				 "a sliding log member's cost must fit its uint16");
/* One sliding-log ring for this many entries of ratelimit.local_max_entries. */
#define RL_LOCAL_ENTRIES_PER_LOG	16

/* One limiter's state: the Lua scripts' fields, as Lua numbers. */
typedef struct RlLocalLog
{
	int32		next;			/* free list */
	int32		head;			/* oldest member */
	int32		count;
	int32		pad;
	double		t[RL_LOCAL_LOG_CAP];	/* member times (us) */
	uint16		cost[RL_LOCAL_LOG_CAP]; /* member costs, <= the limit */
} RlLocalLog;

typedef struct RlLocalEntry
{
	uint64		hash;
	int32		next;			/* hash chain, or free list */
	int32		log;			/* sliding log ring, -1 for none */
	uint16		keylen;			/* bytes of the whole key (capped) */
	bool		valid;			/* false: reserved, holds no state yet */
	uint8		pad;
	int32		pad2;
	int64		expires_at;		/* us on the call's clock, like a PEXPIRE */
	double		st[4];			/* algorithm state, see rl_local_algo.c */
	char		key[RL_LOCAL_KEY_INLINE];
} RlLocalEntry;

/* What one algorithm run decided (the Lua scripts' five results). */
typedef struct RlLocalResult
{
	bool		ok;
	double		remaining;
	double		retry;			/* us */
	double		reset;			/* us */
	bool		apply;			/* write st (and the log) back */
	double		st[4];			/* the state to write */
	double		ttl_ms;			/* PEXPIRE of the write */
	/* sliding log: how to change its ring */
	bool		log_clear;		/* start afresh (Lua: UNLINK) */
	int			log_prune;		/* oldest members to drop first */
	double		log_stamp;
	double		log_cost;
} RlLocalResult;

/* rl_guc.c */
extern int	rl_engine;
extern int	rl_local_max_entries;

/* rl_local_store.c: the shared table */
extern void rl_local_init(void);
extern bool rl_local_ready(void);
extern double rl_local_clock(const char *pinned);
extern int	rl_local_partition(uint64 hash);
extern uint64 rl_local_hash(const char *key, size_t len);
extern void rl_local_lock(const int *parts, int n);
extern void rl_local_unlock(const int *parts, int n);
extern RlLocalEntry *rl_local_find(const char *key, size_t len, uint64 hash,
								   double now, bool reserve, bool *full);
extern void rl_local_release(RlLocalEntry *entry, uint64 hash);
extern RlLocalLog *rl_local_log(RlLocalEntry *entry, bool create);
extern void rl_local_full_warning(void);

/* rl_local_algo.c: the six algorithms, as lua/ computes them */
extern void rl_local_algorithm(int algorithm, RlLocalEntry *entry,
							   double limit, double window, double cost,
							   double burst, double now, RlLocalResult *res);
extern bool rl_local_write(int algorithm, RlLocalEntry *entry,
						   const RlLocalResult *res, double now);

/* rl_local_run.c: script calls and commands answered locally */
extern bool rl_local_run(RlScriptCall *calls, int n, redisReply **replies);
extern bool rl_local_command(RlCommand *cmd, redisReply **reply);
extern void rl_local_failover(RlScriptCall *calls, int n, redisReply **replies);
extern bool rl_local_check(const RlLimiter *limiter, const char *rkey,
						   int64 cost, RlAnswer *answer);

#endif							/* RL_LOCAL_H */
