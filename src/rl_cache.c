/*-------------------------------------------------------------------------
 *
 * rl_cache.c
 *	  The local over-limit cache.
 *
 * When Redis denies a call with retry_after_ms = r, nothing but time (or
 * an administrator's rl_reset) can make that call pass before r has gone
 * by: other callers can only consume more.  With ratelimit.deny_cache on,
 * the backend remembers the denial and answers the same limiter, for the
 * same or a larger cost, itself until then, so a flood on a denied key
 * costs Redis one call per backend per retry period.
 *
 * The cached answer can only deny, never admit, and it expires a little
 * after Redis would have admitted again (by the reply's travel time), so
 * it never lets more through.  What it gives up: an rl_reset made by
 * another backend is not seen until the entry expires.  That is why it is
 * off by default.  With a pinned test clock it is never used.
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
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "rl_cache.h"

/* Entries at most; an overflowing cache first drops what has expired. */
#define RL_CACHE_MAX	4096

typedef struct RlCacheEntry
{
	uint64		hash;			/* hash key: hash of the Redis key */
	char	   *rkey;			/* the Redis key, to rule out collisions */
	int64		limit;
	int64		window_us;
	int64		cost;			/* denied for this cost or more */
	int64		remaining;
	TimestampTz until;			/* denied until then */
	TimestampTz reset_at;
} RlCacheEntry;

static HTAB *rl_cache = NULL;
static MemoryContext rl_cache_cxt = NULL;

bool		rl_deny_cache = false;

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

static uint64
rl_cache_hash(const char *rkey)
{
	return hash_bytes_extended((const unsigned char *) rkey, strlen(rkey), 0);
}

/* Usable only with the real clock: a pinned one does not move with time. */
static bool
rl_cache_enabled(void)
{
	return rl_deny_cache && rl_test_clock_ms <= 0;
}

/*
 * Answers a call from the cache if a live denial covers it: same limiter,
 * same limit and window, a cost at least as large.
 */
bool
rl_cache_lookup(const char *rkey, const RlLimiter *limiter, int64 cost,
				RlAnswer *answer)
{
	uint64		hash;
	RlCacheEntry *entry;
	TimestampTz now;

	if (!rl_cache_enabled() || rl_cache == NULL)
		return false;
	hash = rl_cache_hash(rkey);
	entry = hash_search(rl_cache, &hash, HASH_FIND, NULL);
	if (entry == NULL || strcmp(entry->rkey, rkey) != 0 ||
		entry->limit != limiter->limit || entry->window_us != limiter->window_us ||
		cost < entry->cost)
		return false;

	now = GetCurrentTimestamp();
	if (now >= entry->until)
	{
		pfree(entry->rkey);
		hash_search(rl_cache, &hash, HASH_REMOVE, NULL);
		return false;
	}
	answer->known = true;
	answer->allowed = false;
	answer->remaining = entry->remaining;
	answer->retry_after_ms = TimestampDifferenceMilliseconds(now, entry->until);
	answer->reset_after_ms = TimestampDifferenceMilliseconds(now, entry->reset_at);
	return true;
}

/* Drops entries that have expired; all of them if none has. */
static void
rl_cache_make_room(TimestampTz now)
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

/* Remembers a denial Redis just gave. */
void
rl_cache_remember(const char *rkey, const RlLimiter *limiter, int64 cost,
				  const RlAnswer *answer)
{
	uint64		hash;
	RlCacheEntry *entry;
	bool		found;
	TimestampTz now;

	if (!rl_cache_enabled() || !answer->known || answer->allowed)
		return;
	now = GetCurrentTimestamp();
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
	entry->cost = cost;
	entry->remaining = answer->remaining;
	entry->until = TimestampTzPlusMilliseconds(now, answer->retry_after_ms);
	entry->reset_at = TimestampTzPlusMilliseconds(now, answer->reset_after_ms);
}

/* rl_reset in this backend forgets the limiter here too. */
void
rl_cache_forget(const char *rkey)
{
	uint64		hash;
	RlCacheEntry *entry;

	if (rl_cache == NULL)
		return;
	hash = rl_cache_hash(rkey);
	entry = hash_search(rl_cache, &hash, HASH_FIND, NULL);
	if (entry != NULL)
	{
		pfree(entry->rkey);
		hash_search(rl_cache, &hash, HASH_REMOVE, NULL);
	}
}
