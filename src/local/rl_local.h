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
 *	  src/local/rl_local.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_LOCAL_H
#define RL_LOCAL_H

#include "rl_guc.h"
#include "rl_stats.h"
#include "rl_store.h"

/* ratelimit.engine */

/*
 * Most members after a refunded one that a sliding log's refund rewrites
 * (lua/sliding_log.lua's RL_LOG_REWRITE_MAX): past it, nothing is given
 * back, so that no refund holds a partition's lock for long.
 */
#define RL_LOG_REWRITE_MAX		1024

/* Keys up to this many bytes are kept whole; longer ones by two hashes. */
#define RL_LOCAL_KEY_INLINE		128

/*
 * sliding_log.lua's RL_LOG_WRAP: the script's cums stay below it, so a
 * receipt's cum is the local cum modulo it.
 */
#define RL_LOCAL_LOG_WRAP	UINT64CONST(1000000000000000)

/* One member of a sliding log: its time, and the sum of the costs so far. */
typedef struct RlLocalMember
{
	double		t;				/* us */
	uint64		cum;			/* costs of the log's calls up to this one */
} RlLocalMember;

typedef struct RlLocalLogBlock
{
	int32		next;			/* the log's next block, or free list */
	int32		pad;
	RlLocalMember m[RL_LOCAL_LOG_BLOCK];
} RlLocalLogBlock;

/*
 * A sliding log's chain: members in call order from slot off of the
 * first block (RlLocalEntry.log) to the last block, tail.  Only the last
 * block has free slots.  base is the cum before the oldest member, so a
 * member's cost is its cum minus its predecessor's (unsigned: wraps).
 */
typedef struct RlLocalLogHead
{
	int32		tail;
	int32		nblocks;
	int32		off;
	int32		count;
	uint64		base;
} RlLocalLogHead;

typedef struct RlLocalEntry
{
	uint64		hash;
	int32		next;			/* hash chain, or free list */
	int32		log;			/* sliding log's first block, -1 for none */
	uint16		keylen;			/* bytes of the whole key (capped) */
	bool		valid;			/* false: reserved, holds no state yet */
	uint8		pad;
	int32		pad2;
	int64		expires_at;		/* us on the call's clock, like a PEXPIRE */
	union
	{
		double		st[4];		/* algorithm state, see rl_local_algo.c */
		RlLocalLogHead lg;		/* sliding_log: its chain of members */
	}			u;
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
	/* the receipt of what an admitted call took (lua/common.lua's rl_one) */
	double		r1;
	double		r2;
} RlLocalResult;

/* Why a call found no room (rl_local_run.c answers it by the policy). */
typedef enum RlLocalRoom
{
	RL_ROOM_OK,
	RL_ROOM_NO_ENTRY,			/* ratelimit.local_max_entries is full */
	RL_ROOM_NO_LOG				/* ratelimit.local_log_entries is full */
} RlLocalRoom;

/* rl_guc.c */

/* rl_local_store.c: the shared table */
extern void rl_local_init(void);
extern bool rl_local_ready(void);
extern double rl_local_wall_clock(void);
extern double rl_local_clock(const int *parts, int n, double pinned,
							 double wall);
extern int	rl_local_partition(uint64 hash);
extern uint64 rl_local_hash(const char *key, size_t len);
extern void rl_local_lock(const int *parts, int n);
extern void rl_local_unlock(const int *parts, int n);
extern RlLocalEntry *rl_local_find(const char *key, size_t len, uint64 hash,
								   double now, bool reserve, bool *full,
								   RlLocalEntry *const *keep, int nkeep);
extern void rl_local_release(RlLocalEntry *entry, uint64 hash);
/*
 * What a running call holds while it makes room for a log: its locked
 * partitions, and the entries it has found (which nothing may free).
 */
typedef struct RlLocalHeld
{
	const int  *parts;
	int			nparts;
	RlLocalEntry *const *keep;
	int			nkeep;
} RlLocalHeld;

extern bool rl_local_reclaim_for_log(double now, const RlLocalHeld *held);
extern const char *rl_local_room_setting(RlLocalRoom why);
extern const char *rl_local_room_detail(RlLocalRoom why);

/* rl_local_log.c: the sliding logs' pool of members */
extern Size rl_local_log_size(void);
extern void rl_local_log_startup(void);
extern bool rl_local_log_room(RlLocalEntry *entry, int need);
extern bool rl_local_log_any_free(void);
extern void rl_local_log_free(RlLocalEntry *entry);
extern RlLocalMember *rl_local_log_at(const RlLocalEntry *entry, int i);
extern int	rl_local_log_first_after(const RlLocalEntry *entry, double floor_t);
extern int	rl_local_log_reach(const RlLocalEntry *entry, int first,
							   uint64 k);
extern uint64 rl_local_log_cum_before(const RlLocalEntry *entry, int i);
extern void rl_local_log_clear(RlLocalEntry *entry);
extern void rl_local_log_prune(RlLocalEntry *entry, int n);
extern void rl_local_log_push(RlLocalEntry *entry, double t, uint64 cost);
extern bool rl_local_log_refund(RlLocalEntry *entry, double t, uint64 cost,
								uint64 cum);

/* rl_local_algo.c: the six algorithms, as lua/ computes them */
extern void rl_local_algorithm(int algorithm, RlLocalEntry *entry,
							   double limit, double window, double cost,
							   double burst, double now, bool carry,
							   RlLocalResult *res);
extern void rl_local_write(int algorithm, RlLocalEntry *entry,
						   const RlLocalResult *res, double now);
extern bool rl_local_refund(int algorithm, RlLocalEntry *entry, double limit,
							double window, double capacity, bool carry,
							double cost, double r1, double r2, double now);


#endif							/* RL_LOCAL_H */
