/*-------------------------------------------------------------------------
 *
 * rl_local_store.c
 *	  The local engine's table of limiter states in shared memory.
 *
 * A fixed-size hash table, allocated at server start from the setting
 * ratelimit.local_max_entries and split into RL_LOCAL_PARTITIONS
 * partitions by the key's hash.  Each partition has its own LWLock, its
 * own entries, hash chains, free list and clock (rl_local_clock), so
 * backends working on keys of different partitions never wait for each
 * other nor write a common cache line, and a check holds one lock for the
 * few hundred nanoseconds of a lookup and an algorithm run.
 * Sliding logs keep their members in blocks of a separate pool
 * (rl_local_log.c), laid out at the same time.
 *
 * An entry's expiry is its Redis TTL: an expired entry still reads as its
 * script reads the state (which by then means "fresh"), and is reclaimed
 * when its partition needs room.  When a partition has no free entry and
 * none has expired, the table is full: the call that needs a new entry
 * gets the failure policy's answer with a WARNING (rl_local_run.c);
 * nothing is evicted, since a limiter that forgets its count admits.
 *
 * Nothing here is written to WAL or survives a restart, and PostgreSQL's
 * crash restart (a backend killed while holding a lock) reinitialises the
 * whole table with the rest of shared memory.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/local/rl_local_store.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/time.h>

#include "common/hashfn.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/timestamp.h"

#include "rl_local.h"

#define RL_LOCAL_TRANCHE	"ratelimit_local"
/* Long keys: the inline bytes kept, then a second hash in the last 8. */
#define RL_LOCAL_KEY_PREFIX	(RL_LOCAL_KEY_INLINE - 8)

/*
 * A partition's own line: its clock is written by every call on it, so
 * partitions do not share a cache line (nor did the table's one clock, on
 * which every backend once did a compare-and-swap per call).
 */
typedef struct RlLocalPartition
{
	int32		free;			/* first free entry, -1 for none */
	int32		used;
	double		clock;			/* newest wall clock a call on it used (us) */
	char		pad[PG_CACHE_LINE_SIZE - 2 * sizeof(int32) - sizeof(double)];
} RlLocalPartition;

typedef struct RlLocalShared
{
	int32		per_part;		/* entries per partition */
	int32		nbuckets;		/* hash chains per partition, a power of 2 */
	uint64		seed;			/* the key hash's, drawn at each start */
	uint64		seed2;			/* a long key's second hash's */
	char		pad[PG_CACHE_LINE_SIZE - 2 * sizeof(int32) - 2 * sizeof(uint64)];
	RlLocalPartition part[RL_LOCAL_PARTITIONS];
} RlLocalShared;

static RlLocalShared *rl_local = NULL;
static int32 *rl_local_buckets = NULL;
static RlLocalEntry *rl_local_entries = NULL;
static LWLockPadded *rl_local_locks = NULL;

static shmem_request_hook_type rl_prev_request_hook = NULL;
static shmem_startup_hook_type rl_prev_startup_hook = NULL;

/*
 * The hash seeds, random at each server start (and crash restart).  A
 * key's partition and chain come from its hash: with a seed anyone knows,
 * a caller could compute keys that share a victim's partition and fill it
 * with a few dozen calls, so that the victim's limiter finds no room and
 * its calls get the failure policy's answer; or build a long key whose
 * two hashes equal another's, to share its entry.  Nothing outlives the
 * table, so nothing needs the same seed twice.
 */
static void
rl_local_seeds(uint64 *seed, uint64 *seed2)
{
	if (!pg_strong_random(seed, sizeof(*seed)) ||
		!pg_strong_random(seed2, sizeof(*seed2)))
		ereport(FATAL,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate random seeds for the ratelimit local engine")));
}

/* The table's geometry, from the setting (fixed at server start). */
static void
rl_local_geometry(int32 *per_part, int32 *nbuckets)
{
	*per_part = (rl_local_max_entries + RL_LOCAL_PARTITIONS - 1) /
		RL_LOCAL_PARTITIONS;
	*nbuckets = 1;
	while (*nbuckets < *per_part)
		*nbuckets *= 2;
}

static Size
rl_local_size(void)
{
	int32		per_part,
				nbuckets;
	Size		size;

	rl_local_geometry(&per_part, &nbuckets);
	size = MAXALIGN(sizeof(RlLocalShared));
	size = add_size(size, MAXALIGN(mul_size(sizeof(int32),
											mul_size(RL_LOCAL_PARTITIONS, nbuckets))));
	size = add_size(size, mul_size(sizeof(RlLocalEntry),
								   mul_size(RL_LOCAL_PARTITIONS, per_part)));
	return size;
}

/* Asks the postmaster for the table and its locks. */
static void
rl_local_request(void)
{
	if (rl_prev_request_hook)
		rl_prev_request_hook();
	RequestAddinShmemSpace(rl_local_size());
	RequestAddinShmemSpace(rl_local_log_size());
	RequestNamedLWLockTranche(RL_LOCAL_TRANCHE, RL_LOCAL_PARTITIONS);
}

/*
 * Lays out the table: every entry free, every log block free.  Also run after
 * a crash restart, so a lock held by a killed backend is gone with it.
 */
static void
rl_local_startup(void)
{
	bool		found;
	char	   *p;

	if (rl_prev_startup_hook)
		rl_prev_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	p = ShmemInitStruct("ratelimit local engine", rl_local_size(), &found);
	rl_local = (RlLocalShared *) p;
	rl_local_locks = GetNamedLWLockTranche(RL_LOCAL_TRANCHE);
	if (!found)
	{
		memset(rl_local, 0, sizeof(RlLocalShared));
		rl_local_geometry(&rl_local->per_part, &rl_local->nbuckets);
		rl_local_seeds(&rl_local->seed, &rl_local->seed2);
	}
	p += MAXALIGN(sizeof(RlLocalShared));
	rl_local_buckets = (int32 *) p;
	p += MAXALIGN(sizeof(int32) * RL_LOCAL_PARTITIONS * rl_local->nbuckets);
	rl_local_entries = (RlLocalEntry *) p;
	p += sizeof(RlLocalEntry) * RL_LOCAL_PARTITIONS * rl_local->per_part;
	rl_local_log_startup();
	if (!found)
	{
		int32		per_part = rl_local->per_part;

		for (int i = 0; i < RL_LOCAL_PARTITIONS * rl_local->nbuckets; i++)
			rl_local_buckets[i] = -1;
		for (int part = 0; part < RL_LOCAL_PARTITIONS; part++)
		{
			int32		base = part * per_part;

			for (int i = 0; i < per_part; i++)
				rl_local_entries[base + i].next =
					i + 1 < per_part ? base + i + 1 : -1;
			rl_local->part[part].free = base;
			rl_local->part[part].used = 0;
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* From _PG_init, when preloaded: installs the shared memory hooks. */
void
rl_local_init(void)
{
	rl_prev_request_hook = shmem_request_hook;
	shmem_request_hook = rl_local_request;
	rl_prev_startup_hook = shmem_startup_hook;
	shmem_startup_hook = rl_local_startup;
}

/* True when the table exists (the library was preloaded). */
bool
rl_local_ready(void)
{
	return rl_local != NULL;
}


/*
 * A reading of the wall clock in us (as Redis TIME), taken before a call
 * locks its partitions, so that the lock is not held for it.
 */
double
rl_local_wall_clock(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (double) ((uint64) tv.tv_sec * 1000000 + tv.tv_usec);
}

/* Whether the running call's clock is pinned (rl_local_reclaim_for_log). */
static bool rl_local_clock_pinned = false;

/*
 * The clock of a call, in us, with the locks of its n partitions held:
 * the pinned one (tests), else the wall clock read before the locks, never
 * earlier than the newest one a call on any of these partitions has used,
 * so that a clock stepped back grants nothing until it has caught up.  A
 * limiter's state lives in one partition and is only ever read and written
 * under its lock, so that partition's clock is every clock its state has
 * seen: the promise is exact per limiter, as the table's one clock made it.
 * This saves the compare-and-swap every call made on that one clock's
 * cache line, which all backends wrote; a partition's clock is a plain
 * write under a lock the call holds anyway.
 */
double
rl_local_clock(const int *parts, int n, double pinned, double wall)
{
	double		now = wall;

	rl_local_clock_pinned = pinned > 0;
	if (pinned > 0)
		return pinned;
	for (int i = 0; i < n; i++)
		now = Max(now, rl_local->part[parts[i]].clock);
	for (int i = 0; i < n; i++)
		rl_local->part[parts[i]].clock = now;
	return now;
}

uint64
rl_local_hash(const char *key, size_t len)
{
	return hash_bytes_extended((const unsigned char *) key, (int) len,
							   rl_local->seed);
}

/* The partition of a hash: its top bits (the chain uses the low ones). */
int
rl_local_partition(uint64 hash)
{
	return (int) (hash >> 57) % RL_LOCAL_PARTITIONS;
}

/* Takes the locks of n distinct partitions, given in ascending order. */
void
rl_local_lock(const int *parts, int n)
{
	for (int i = 0; i < n; i++)
		LWLockAcquire(&rl_local_locks[parts[i]].lock, LW_EXCLUSIVE);
}

void
rl_local_unlock(const int *parts, int n)
{
	for (int i = n - 1; i >= 0; i--)
		LWLockRelease(&rl_local_locks[parts[i]].lock);
}

static bool
rl_local_same(const RlLocalEntry *e, const char *key, size_t len, uint64 hash)
{
	uint64		hash2;

	if (e->hash != hash || e->keylen != Min(len, PG_UINT16_MAX))
		return false;
	if (len <= RL_LOCAL_KEY_INLINE)
		return memcmp(e->key, key, len) == 0;
	hash2 = hash_bytes_extended((const unsigned char *) key, (int) len,
								rl_local->seed2);
	return memcmp(e->key, key, RL_LOCAL_KEY_PREFIX) == 0 &&
		memcmp(e->key + RL_LOCAL_KEY_PREFIX, &hash2, 8) == 0;
}

/* Unlinks an entry from its chain and frees it (partition lock held). */
void
rl_local_release(RlLocalEntry *entry, uint64 hash)
{
	int			part = rl_local_partition(hash);
	int32	   *link = &rl_local_buckets[part * rl_local->nbuckets +
										 (hash & (rl_local->nbuckets - 1))];
	int32		idx = (int32) (entry - rl_local_entries);

	while (*link != -1 && *link != idx)
		link = &rl_local_entries[*link].next;
	Assert(*link == idx);
	if (*link != idx)
		return;
	*link = entry->next;
	rl_local_log_free(entry);
	entry->valid = false;
	entry->next = rl_local->part[part].free;
	rl_local->part[part].free = idx;
	rl_local->part[part].used--;
}

/*
 * Frees every entry of the partition whose TTL has passed at now, but
 * those in keep (entries the running call has found already).
 */
static void
rl_local_reclaim(int part, double now, RlLocalEntry *const *keep, int nkeep)
{
	int32	   *bucket = &rl_local_buckets[part * rl_local->nbuckets];

	for (int b = 0; b < rl_local->nbuckets; b++)
	{
		int32		idx = bucket[b];

		while (idx != -1)
		{
			RlLocalEntry *e = &rl_local_entries[idx];
			int32		next = e->next;

			bool		kept = false;

			for (int k = 0; k < nkeep && !kept; k++)
				kept = keep[k] == e;
			if (e->valid && (double) e->expires_at <= now && !kept)
				rl_local_release(e, e->hash);
			idx = next;
		}
	}
}

/*
 * The entry of a key (its partition locked), or NULL.  With reserve, a
 * missing key gets a new entry holding no state yet (valid false: the
 * caller writes it, or releases it); *full is set when there is no room,
 * after the partition's expired entries (but those in keep) were
 * reclaimed.
 */
RlLocalEntry *
rl_local_find(const char *key, size_t len, uint64 hash, double now,
			  bool reserve, bool *full, RlLocalEntry *const *keep, int nkeep)
{
	int			part = rl_local_partition(hash);
	int32	   *bucket = &rl_local_buckets[part * rl_local->nbuckets +
										   (hash & (rl_local->nbuckets - 1))];
	RlLocalPartition *pt = &rl_local->part[part];
	RlLocalEntry *e;
	int32		idx;

	*full = false;
	for (idx = *bucket; idx != -1; idx = rl_local_entries[idx].next)
	{
		if (rl_local_same(&rl_local_entries[idx], key, len, hash))
			return &rl_local_entries[idx];
	}
	if (!reserve)
		return NULL;
	if (pt->free == -1)
		rl_local_reclaim(part, now, keep, nkeep);
	if (pt->free == -1)
	{
		*full = true;
		return NULL;
	}
	idx = pt->free;
	e = &rl_local_entries[idx];
	pt->free = e->next;
	pt->used++;
	e->hash = hash;
	e->keylen = Min(len, PG_UINT16_MAX);
	e->valid = false;
	e->log = -1;
	e->expires_at = 0;
	memset(&e->u, 0, sizeof(e->u));
	if (len <= RL_LOCAL_KEY_INLINE)
		memcpy(e->key, key, len);
	else
	{
		uint64		hash2 = hash_bytes_extended((const unsigned char *) key,
												(int) len, rl_local->seed2);

		memcpy(e->key, key, RL_LOCAL_KEY_PREFIX);
		memcpy(e->key + RL_LOCAL_KEY_PREFIX, &hash2, 8);
	}
	e->next = *bucket;
	*bucket = idx;
	return e;
}

/*
 * The sliding logs' pool is empty: frees expired entries (and their logs),
 * first in the partitions the call holds, but for the entries it has
 * found, then in every other partition whose lock is free now.  A
 * partition locked by another backend is skipped, so this never waits and
 * never frees what a running call holds.  True when a block is free
 * afterwards.
 */
bool
rl_local_reclaim_for_log(double now, const RlLocalHeld *held)
{
	for (int i = 0; i < held->nparts; i++)
	{
		rl_local_reclaim(held->parts[i], now, held->keep, held->nkeep);
		if (rl_local_log_any_free())
			return true;
	}
	for (int part = 0; part < RL_LOCAL_PARTITIONS; part++)
	{
		LWLock	   *lock = &rl_local_locks[part].lock;

		/* The call's own partitions are locked: skipped here. */
		if (!LWLockConditionalAcquire(lock, LW_EXCLUSIVE))
			continue;

		/*
		 * Entries of another partition expire by the caller's clock, which
		 * may be ahead of that partition's own: its clock moves up to it
		 * first, as if the call had been made there, so that no later call
		 * on it runs at a time before the one its entries were freed at.
		 */
		if (!rl_local_clock_pinned)
			rl_local->part[part].clock = Max(rl_local->part[part].clock, now);
		rl_local_reclaim(part, now, NULL, 0);
		LWLockRelease(lock);
		if (rl_local_log_any_free())
			return true;
	}
	return rl_local_log_any_free();
}

/* The setting whose room ran out, and why, for the messages. */
const char *
rl_local_room_setting(RlLocalRoom why)
{
	return why == RL_ROOM_NO_LOG ? "ratelimit.local_log_entries" :
		"ratelimit.local_max_entries";
}

const char *
rl_local_room_detail(RlLocalRoom why)
{
	return why == RL_ROOM_NO_LOG ?
		_("Every block of the local engine's pool of sliding-log calls holds calls of a limiter whose state has not expired.") :
		_("Every entry of the limiter's partition of the local engine's table holds a limiter whose state has not expired.");
}

