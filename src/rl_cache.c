/*-------------------------------------------------------------------------
 *
 * rl_cache.c
 *	  The local over-limit cache.
 *
 * When Redis denies a call with retry_after_ms = r, nothing but time (or
 * an administrator's rl_reset) can make that call pass before r has gone
 * by: other callers can only consume more.  With ratelimit.deny_cache on,
 * the backend remembers the denial and answers the same limiter, for the
 * same cost, itself until then, so a flood on a denied key costs Redis one
 * call per backend per retry period.  (A larger cost would be denied too,
 * but for longer than the cached wait says, so it goes to Redis.)
 *
 * The cached answer can only deny, never admit, and it expires a little
 * after Redis would have admitted again (by the reply's travel time), so
 * it never lets more through.  Only a reset can make a denied call pass
 * early.  Every rl_reset on this server bumps a counter in shared memory,
 * and a backend that sees it move drops its cached denials, so a reset
 * here is seen by every backend at once; a reset made elsewhere (another
 * server, or the keys deleted in Redis) is seen when the denial expires.
 * It is on by default.  With a pinned test clock it is never used.
 *
 * Waits are kept on the monotonic clock, so a step of the host's wall
 * clock cannot lengthen a cached denial, and the cache is emptied when the
 * Redis endpoint changes (host, port, socket, database, redis_mode or the
 * cluster's redis_nodes), or ratelimit.engine does: another server's
 * limiters, or the local engine's, are other limiters.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_cache.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "portability/instr_time.h"
#include "utils/timestamp.h"

#include "rl_cache.h"
#include "rl_guc.h"

/* Entries at most; an overflowing cache first drops what has expired. */
#define RL_CACHE_MAX	4096

typedef struct RlCacheEntry
{
	uint64		hash;			/* hash key: hash of the Redis key */
	char	   *rkey;			/* the Redis key, to rule out collisions */
	int64		limit;
	int64		window_us;
	int64		burst;
	int64		cost;			/* denied for this cost */
	int64		remaining;
	int64		until;			/* denied until then (rl_cache_now) */
	int64		reset_at;
} RlCacheEntry;

/* Shared by every backend of the server. */
typedef struct RlCacheShared
{
	pg_atomic_uint64 resets;	/* rl_reset calls so far */
} RlCacheShared;

static HTAB *rl_cache = NULL;
static MemoryContext rl_cache_cxt = NULL;
static uint64 rl_cache_resets = 0;	/* resets the cache has seen */
/* The endpoint its denials came from (copies of the settings). */
static char *rl_cache_host = NULL;
static char *rl_cache_socket = NULL;
static int	rl_cache_port = -1;
static int	rl_cache_db = -1;
static int	rl_cache_mode = -1;
static char *rl_cache_nodes = NULL;
static int	rl_cache_engine = -1;
static RlCacheShared *rl_cache_shared = NULL;
static shmem_request_hook_type rl_prev_shmem_request_hook = NULL;
static shmem_startup_hook_type rl_prev_shmem_startup_hook = NULL;

bool		rl_deny_cache = true;

/* Room for the shared counter, asked for before shared memory is made. */
static void
rl_cache_shmem_request(void)
{
	if (rl_prev_shmem_request_hook)
		rl_prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(RlCacheShared)));
}

/* Finds the shared counter, or makes it when the server starts. */
static void
rl_cache_shmem_startup(void)
{
	bool		found;

	if (rl_prev_shmem_startup_hook)
		rl_prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	rl_cache_shared = ShmemInitStruct("ratelimit", sizeof(RlCacheShared), &found);
	if (!found)
		pg_atomic_init_u64(&rl_cache_shared->resets, 0);
	LWLockRelease(AddinShmemInitLock);
}

/*
 * Asks for the shared reset counter; called from _PG_init while the
 * library is being preloaded.
 */
void
rl_cache_init(void)
{
	rl_prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = rl_cache_shmem_request;
	rl_prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = rl_cache_shmem_startup;
}

/*
 * The server's reset count.  A caller reads it before asking Redis and
 * passes it to rl_cache_remember, so a denial that may predate a reset
 * is never kept.
 */
uint64
rl_cache_epoch(void)
{
	if (rl_cache_shared == NULL)
		return 0;
	return pg_atomic_read_u64(&rl_cache_shared->resets);
}

/*
 * Tells every backend of this server that limiters were reset: their
 * cached denials may be wrong now.  Called after the keys were deleted,
 * whether or not the DEL was known to succeed.
 */
void
rl_cache_invalidate(void)
{
	if (rl_cache_shared != NULL)
		pg_atomic_fetch_add_u64(&rl_cache_shared->resets, 1);
}

static void
rl_cache_create(void)
{
	HASHCTL		ctl;

	if (rl_cache_cxt == NULL)
		rl_cache_cxt = AllocSetContextCreate(TopMemoryContext,
											 "ratelimit deny cache",
											 ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(rl_cache_cxt);
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(RlCacheEntry);
	ctl.hcxt = rl_cache_cxt;
	rl_cache = hash_create("ratelimit deny cache", 256, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/* Microseconds on the monotonic clock, which no wall-clock step moves. */
static int64
rl_cache_now(void)
{
	instr_time	now;

	INSTR_TIME_SET_CURRENT(now);
	return (int64) INSTR_TIME_GET_MICROSEC(now);
}

/* Whole milliseconds from now until "at", rounded up, never negative. */
static int64
rl_cache_ms_until(int64 now, int64 at)
{
	return at <= now ? 0 : (at - now + 999) / 1000;
}

static uint64
rl_cache_hash(const char *rkey)
{
	return hash_bytes_extended((const unsigned char *) rkey, strlen(rkey), 0);
}

/*
 * Usable only with the real clock (a pinned one does not move with time).
 * Drops every cached denial once a reset has been made on this server, or
 * when the settings now name another Redis or the other engine.
 */
static bool
rl_cache_enabled(void)
{
	uint64		resets;
	bool		moved;

	if (!rl_deny_cache || rl_test_clock_ms > 0)
		return false;
	resets = rl_cache_epoch();
	moved = rl_cache_host == NULL ||
		rl_redis_port != rl_cache_port || rl_redis_db != rl_cache_db ||
		strcmp(rl_redis_host, rl_cache_host) != 0 ||
		strcmp(rl_redis_socket, rl_cache_socket) != 0 ||
		rl_redis_mode != rl_cache_mode ||
		strcmp(rl_redis_nodes, rl_cache_nodes) != 0 ||
		rl_engine != rl_cache_engine;
	if (resets != rl_cache_resets || moved)
	{
		if (rl_cache != NULL)
			rl_cache_create();
		rl_cache_resets = resets;
	}
	if (moved)
	{
		if (rl_cache_host != NULL)
		{
			pfree(rl_cache_host);
			pfree(rl_cache_socket);
			pfree(rl_cache_nodes);
		}
		rl_cache_host = MemoryContextStrdup(TopMemoryContext, rl_redis_host);
		rl_cache_socket = MemoryContextStrdup(TopMemoryContext, rl_redis_socket);
		rl_cache_port = rl_redis_port;
		rl_cache_db = rl_redis_db;
		rl_cache_mode = rl_redis_mode;
		rl_cache_nodes = MemoryContextStrdup(TopMemoryContext, rl_redis_nodes);
		rl_cache_engine = rl_engine;
	}
	return true;
}

/*
 * Answers a call from the cache if a live denial covers it: same limiter,
 * same limit, window, burst and cost.
 */
bool
rl_cache_lookup(const char *rkey, const RlLimiter *limiter, int64 cost,
				RlAnswer *answer)
{
	uint64		hash;
	RlCacheEntry *entry;
	int64		now;

	if (!rl_cache_enabled() || rl_cache == NULL)
		return false;
	hash = rl_cache_hash(rkey);
	entry = hash_search(rl_cache, &hash, HASH_FIND, NULL);
	if (entry == NULL || strcmp(entry->rkey, rkey) != 0 ||
		entry->limit != limiter->limit || entry->window_us != limiter->window_us ||
		entry->burst != limiter->burst || cost != entry->cost)
		return false;

	now = rl_cache_now();
	if (now >= entry->until)
	{
		pfree(entry->rkey);
		hash_search(rl_cache, &hash, HASH_REMOVE, NULL);
		return false;
	}
	answer->known = true;
	answer->allowed = false;
	answer->remaining = entry->remaining;
	answer->retry_after_ms = Max(1, rl_cache_ms_until(now, entry->until));
	answer->reset_after_ms = rl_cache_ms_until(now, entry->reset_at);
	return true;
}

/* Drops entries that have expired; all of them if none has. */
static void
rl_cache_make_room(int64 now)
{
	HASH_SEQ_STATUS status;
	RlCacheEntry *entry;

	hash_seq_init(&status, rl_cache);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (now >= entry->until)
		{
			pfree(entry->rkey);
			hash_search(rl_cache, &entry->hash, HASH_REMOVE, NULL);
		}
	}
	if (hash_get_num_entries(rl_cache) >= RL_CACHE_MAX)
		rl_cache_create();
}

/*
 * Remembers a denial Redis just gave, unless a reset was made since the
 * call was sent (epoch, from rl_cache_epoch before sending).
 */
void
rl_cache_remember(const char *rkey, const RlLimiter *limiter, int64 cost,
				  const RlAnswer *answer, uint64 epoch)
{
	uint64		hash;
	RlCacheEntry *entry;
	bool		found;
	int64		now;

	if (!answer->known || answer->allowed || !rl_cache_enabled() ||
		epoch != rl_cache_resets)
		return;
	now = rl_cache_now();
	if (rl_cache == NULL)
		rl_cache_create();
	else if (hash_get_num_entries(rl_cache) >= RL_CACHE_MAX)
		rl_cache_make_room(now);

	hash = rl_cache_hash(rkey);
	entry = hash_search(rl_cache, &hash, HASH_ENTER, &found);
	if (found)
		pfree(entry->rkey);
	entry->rkey = MemoryContextStrdup(rl_cache_cxt, rkey);
	entry->limit = limiter->limit;
	entry->window_us = limiter->window_us;
	entry->burst = limiter->burst;
	entry->cost = cost;
	entry->remaining = answer->remaining;
	entry->until = now + answer->retry_after_ms * 1000;
	entry->reset_at = now + answer->reset_after_ms * 1000;
}
