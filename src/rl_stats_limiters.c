/*-------------------------------------------------------------------------
 *
 * rl_stats_limiters.c
 *	  The limiters denying most: rl_stats_limiters().
 *
 * A denial is counted first in a backend-local table (Redis key and
 * algorithm), and added to a shared one, bounded by
 * ratelimit.stats_max_limiters, under one lock: at most every
 * RL_STATS_FLUSH_MS while the backend keeps being denied, at the first
 * commit after that time, when the backend reads rl_stats_limiters and
 * when it exits.  Eight backends denied on one hot key thus take the lock
 * a few times a second, not on every call.  A full table drops its
 * least-denied 5% to make room, as pg_stat_statements does.  A reset
 * (rl_stats_reset) bumps a generation number; denials counted before it
 * and not yet added are dropped.
 *
 * Both tables hash only the used bytes of a key, not its whole 256-byte
 * slot, and a pending entry keeps its hash for the flush.  An entry denied
 * again stays in the backend between flushes, its count zeroed, so a
 * batch of the same thousand keys finds its entries in place: a thousand
 * short hashes per batch, where there were two thousand long ones and a
 * table made anew.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_stats_limiters.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "common/hashfn.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "rl_args.h"
#include "rl_stats.h"

PG_FUNCTION_INFO_V1(rl_stats_limiters);

/* Bytes of a limiter's Redis key kept; longer keys share an entry. */
#define RL_STATS_KEY_BYTES	256

/* A backend adds its denials to the shared table this often. */
#define RL_STATS_FLUSH_MS	500

typedef struct RlLimiterKey
{
	char		key[RL_STATS_KEY_BYTES];	/* NUL-terminated; bytes after it unused */
	int32		algorithm;
} RlLimiterKey;

typedef struct RlLimiterEntry
{
	RlLimiterKey k;
	uint32		hash;			/* of k, so that a flush need not hash again */
	int64		denied;
	TimestampTz last_denied;
} RlLimiterEntry;

typedef struct RlLimiterShared
{
	LWLock	   *lock;			/* the table and evicted */
	pg_atomic_uint64 generation;	/* bumped by each reset */
	int64		evicted;		/* entries dropped for room */
} RlLimiterShared;

static RlLimiterShared *rl_lim_shared = NULL;
static HTAB *rl_lim_table = NULL;

/* Denials not yet added to the shared table, and of which reset. */
static HTAB *rl_pending = NULL;
static uint64 rl_pending_generation = 0;
static TimestampTz rl_last_flush = 0;
static RlLimiterEntry *rl_pending_last = NULL;	/* the last one counted */
static int64 rl_pending_denials = 0;	/* counted since the last flush */

static void rl_stats_flush(TimestampTz now);

/* The hash of a limiter: its key's len used bytes and its algorithm. */
static inline uint32
rl_limiter_hash_of(const char *key, size_t len, int32 algorithm)
{
	return hash_combine(hash_bytes((const unsigned char *) key, (int) len),
						(uint32) algorithm);
}

/* The tables' hash function (HASH_FUNCTION): the used bytes only. */
static uint32
rl_limiter_hash(const void *key, Size keysize)
{
	const RlLimiterKey *k = (const RlLimiterKey *) key;

	return rl_limiter_hash_of(k->key, strnlen(k->key, RL_STATS_KEY_BYTES),
							  k->algorithm);
}

/* The tables' key comparison (HASH_COMPARE): 0 when equal. */
static int
rl_limiter_match(const void *key1, const void *key2, Size keysize)
{
	const RlLimiterKey *a = (const RlLimiterKey *) key1;
	const RlLimiterKey *b = (const RlLimiterKey *) key2;

	return a->algorithm == b->algorithm && strcmp(a->key, b->key) == 0 ? 0 : 1;
}

/* The tables' key copy (HASH_KEYCOPY): the used bytes only. */
static void *
rl_limiter_copy(void *dest, const void *src, Size keysize)
{
	RlLimiterKey *d = (RlLimiterKey *) dest;
	const RlLimiterKey *s = (const RlLimiterKey *) src;

	strlcpy(d->key, s->key, RL_STATS_KEY_BYTES);
	d->algorithm = s->algorithm;
	return dest;
}

/* The HASHCTL of both tables. */
static int
rl_limiter_hashctl(HASHCTL *info)
{
	info->keysize = sizeof(RlLimiterKey);
	info->entrysize = sizeof(RlLimiterEntry);
	info->hash = rl_limiter_hash;
	info->match = rl_limiter_match;
	info->keycopy = rl_limiter_copy;
	return HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_KEYCOPY;
}

/* Asks for the table, its header and its lock (from rl_stats.c's hook). */
void
rl_stats_limiters_request(void)
{
	RequestAddinShmemSpace(add_size(MAXALIGN(sizeof(RlLimiterShared)),
									hash_estimate_size(rl_stats_max_limiters,
													   sizeof(RlLimiterEntry))));
	RequestNamedLWLockTranche("ratelimit_stats_limiters", 1);
}

/* Lays the table out (AddinShmemInitLock held by the caller). */
void
rl_stats_limiters_startup(void)
{
	HASHCTL		info;
	bool		found;

	rl_lim_shared = ShmemInitStruct("ratelimit_stats_limiters",
									sizeof(RlLimiterShared), &found);
	if (!found)
	{
		rl_lim_shared->lock =
			&(GetNamedLWLockTranche("ratelimit_stats_limiters"))->lock;
		pg_atomic_init_u64(&rl_lim_shared->generation, 0);
		rl_lim_shared->evicted = 0;
	}
	rl_lim_table = ShmemInitHash("ratelimit_stats limiters",
								 rl_stats_max_limiters, rl_stats_max_limiters,
								 &info, rl_limiter_hashctl(&info));
}

/* Forgets the pending denials (a reset happened since they were counted). */
static void
rl_pending_drop(void)
{
	if (rl_pending != NULL)
		hash_destroy(rl_pending);
	rl_pending = NULL;
	rl_pending_last = NULL;
	rl_pending_denials = 0;
}

/*
 * Counts a denial of one limiter, named by its Redis key (which holds the
 * database, key and algorithm) for rl_stats_limiters.  Local: the shared
 * table sees it at the next flush.  A flood on one key (the case that
 * matters) takes the fast path: the same entry as the last denial, no
 * hashing.  The time is the statement's start, which costs no clock read.
 */
void
rl_stats_denied(const char *redis_key, RlAlgorithm algorithm)
{
	RlLimiterKey k;
	RlLimiterEntry *e = rl_pending_last;
	bool		found = true;
	TimestampTz now;
	uint64		generation;
	size_t		len;

	if (!rl_stats_enabled || rl_lim_shared == NULL || !rl_stats_have_slot())
		return;
	generation = pg_atomic_read_u64(&rl_lim_shared->generation);
	if (rl_pending != NULL && rl_pending_generation != generation)
		rl_pending_drop();
	if (rl_pending == NULL)
	{
		HASHCTL		info;
		int			flags = rl_limiter_hashctl(&info);

		info.hcxt = TopMemoryContext;
		rl_pending = hash_create("ratelimit pending denials", 64, &info,
								 flags | HASH_CONTEXT);
		rl_pending_generation = generation;
		e = NULL;
	}
	if (e == NULL || e->k.algorithm != algorithm ||
		strcmp(e->k.key, redis_key) != 0)
	{
		uint32		hash;

		/* Only a key too long is clipped (a character at a time). */
		len = strlen(redis_key);
		if (len > RL_STATS_KEY_BYTES - 1)
			len = pg_mbcliplen(redis_key, len, RL_STATS_KEY_BYTES - 1);
		memcpy(k.key, redis_key, len);
		k.key[len] = '\0';
		k.algorithm = algorithm;
		hash = rl_limiter_hash_of(k.key, len, algorithm);
		e = hash_search_with_hash_value(rl_pending, &k, hash, HASH_ENTER, &found);
		if (!found)
		{
			e->hash = hash;
			e->denied = 0;
		}
		rl_pending_last = e;
	}
	e->denied++;
	rl_pending_denials++;
	now = GetCurrentStatementStartTimestamp();
	e->last_denied = now;
	/* The table grows only with a new entry: counted only then. */
	if ((!found && hash_get_num_entries(rl_pending) >= rl_stats_max_limiters) ||
		TimestampDifferenceExceeds(rl_last_flush, now, RL_STATS_FLUSH_MS))
		rl_stats_flush(GetCurrentTimestamp());
}

/* Orders entries least-denied first, the older first among equals. */
static int
rl_entry_cmp(const void *a, const void *b)
{
	const RlLimiterEntry *x = *(RlLimiterEntry *const *) a;
	const RlLimiterEntry *y = *(RlLimiterEntry *const *) b;

	if (x->denied != y->denied)
		return x->denied < y->denied ? -1 : 1;
	if (x->last_denied != y->last_denied)
		return x->last_denied < y->last_denied ? -1 : 1;
	return 0;
}

/*
 * Makes room in the full shared table (lock held exclusively): the 5% of
 * entries with the fewest denials go.  Never raises an ERROR.
 */
static void
rl_stats_evict(void)
{
	long		n = hash_get_num_entries(rl_lim_table);
	RlLimiterEntry **all;
	HASH_SEQ_STATUS seq;
	RlLimiterEntry *e;
	long		i = 0;
	long		victims = Max(1, n / 20);

	all = palloc_extended(sizeof(RlLimiterEntry *) * Max(n, 1), MCXT_ALLOC_NO_OOM);
	if (all == NULL)
		return;
	hash_seq_init(&seq, rl_lim_table);
	while ((e = hash_seq_search(&seq)) != NULL)
		all[i++] = e;
	qsort(all, i, sizeof(RlLimiterEntry *), rl_entry_cmp);
	victims = Min(victims, i);
	for (long j = 0; j < victims; j++)
		hash_search_with_hash_value(rl_lim_table, &all[j]->k, all[j]->hash,
									HASH_REMOVE, NULL);
	rl_lim_shared->evicted += victims;
	pfree(all);
}

/*
 * Adds this backend's pending denials to the shared table.  An entry
 * denied since the last flush stays, its count zeroed, so that a batch of
 * the same thousand keys every time finds its entries in place instead
 * of making them anew; one with no denial since goes (by the hash it
 * keeps, with no hashing), and an empty table is freed.
 */
static void
rl_stats_flush(TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	RlLimiterEntry *e;
	bool		add;

	rl_last_flush = now;
	if (rl_pending == NULL || rl_pending_denials == 0)
		return;
	rl_pending_last = NULL;
	rl_pending_denials = 0;
	LWLockAcquire(rl_lim_shared->lock, LW_EXCLUSIVE);
	add = pg_atomic_read_u64(&rl_lim_shared->generation) == rl_pending_generation;
	hash_seq_init(&seq, rl_pending);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		RlLimiterEntry *s = NULL;
		bool		found;

		if (e->denied == 0)
		{
			/* Removing the entry just returned is allowed during a scan. */
			hash_search_with_hash_value(rl_pending, &e->k, e->hash,
										HASH_REMOVE, NULL);
			continue;
		}
		if (add)
			s = hash_search_with_hash_value(rl_lim_table, &e->k, e->hash,
											HASH_FIND, NULL);
		if (add && s == NULL)
		{
			if (hash_get_num_entries(rl_lim_table) >= rl_stats_max_limiters)
				rl_stats_evict();
			s = hash_search_with_hash_value(rl_lim_table, &e->k, e->hash,
											HASH_ENTER_NULL, &found);
			if (s != NULL)
			{
				s->hash = e->hash;
				s->denied = 0;
				s->last_denied = 0;
			}
		}
		if (s != NULL)
		{
			s->denied += e->denied;
			s->last_denied = Max(s->last_denied, e->last_denied);
		}
		e->denied = 0;
	}
	LWLockRelease(rl_lim_shared->lock);
	if (hash_get_num_entries(rl_pending) == 0 || !add)
		rl_pending_drop();
}

/* At exit: this backend's pending limiter denials go to the shared table. */
static void
rl_stats_exit(int code, Datum arg)
{
	if (rl_pending_denials > 0 && !LWLockHeldByMe(rl_lim_shared->lock))
		rl_stats_flush(GetCurrentTimestamp());
}

/*
 * At commit, pending denials older than RL_STATS_FLUSH_MS go out, so that
 * a backend denied once and then idle does not keep them.  Nothing here
 * can raise an ERROR (the transaction is already committed).
 */
static void
rl_stats_xact(XactEvent event, void *arg)
{
	TimestampTz now;

	/* Entries kept after a flush, with no denial since, cost no clock read. */
	if (event != XACT_EVENT_COMMIT || rl_pending_denials == 0)
		return;
	now = GetCurrentTimestamp();
	if (TimestampDifferenceExceeds(rl_last_flush, now, RL_STATS_FLUSH_MS))
		rl_stats_flush(now);
}

/* A backend with a shared slot: its pending denials go out at commit and exit. */
void
rl_stats_limiters_attach(void)
{
	before_shmem_exit(rl_stats_exit, (Datum) 0);
	RegisterXactCallback(rl_stats_xact, NULL);
}

/* Entries in the table and entries evicted, for rl_stats. */
void
rl_stats_limiters_counts(int64 *entries, int64 *evicted)
{
	LWLockAcquire(rl_lim_shared->lock, LW_SHARED);
	*entries = hash_get_num_entries(rl_lim_table);
	*evicted = rl_lim_shared->evicted;
	LWLockRelease(rl_lim_shared->lock);
}

/* Empties the table (rl_stats_reset); pending denials everywhere are dropped. */
void
rl_stats_limiters_reset(void)
{
	HASH_SEQ_STATUS seq;
	RlLimiterEntry *e;

	LWLockAcquire(rl_lim_shared->lock, LW_EXCLUSIVE);
	rl_lim_shared->evicted = 0;
	hash_seq_init(&seq, rl_lim_table);
	while ((e = hash_seq_search(&seq)) != NULL)
		hash_search_with_hash_value(rl_lim_table, &e->k, e->hash, HASH_REMOVE,
									NULL);
	pg_atomic_fetch_add_u64(&rl_lim_shared->generation, 1);
	LWLockRelease(rl_lim_shared->lock);
	rl_pending_drop();
}

/*
 * rl_stats_limiters(): the shared table (the view rl_stats_limiters).
 * Keys name callers and tenants, so only superusers and members of
 * pg_read_all_stats see them, as with pg_stat_statements' query text;
 * other readers get NULL keys with the algorithm and counts.
 *
 * The entries are copied under the lock and emitted after it: a result
 * larger than work_mem goes to a temporary file, and every backend adding
 * its denials meanwhile would wait for the lock, where no cancel reaches
 * it.  The copy costs one palloc of the table's entries (280 bytes
 * each, stats_max_limiters at most).
 */
Datum
rl_stats_limiters(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		may_see = superuser() ||
		has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	HASH_SEQ_STATUS seq;
	RlLimiterEntry *e;
	RlLimiterEntry *copy;
	long		n;
	long		i = 0;

	rl_stats_require();
	InitMaterializedSRF(fcinfo, 0);
	if (rl_pending != NULL &&
		rl_pending_generation != pg_atomic_read_u64(&rl_lim_shared->generation))
		rl_pending_drop();
	rl_stats_flush(GetCurrentTimestamp());
	LWLockAcquire(rl_lim_shared->lock, LW_SHARED);
	n = hash_get_num_entries(rl_lim_table);
	copy = palloc(sizeof(RlLimiterEntry) * Max(n, 1));
	hash_seq_init(&seq, rl_lim_table);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		if (i < n)				/* no writer under LW_SHARED: always */
			copy[i++] = *e;
	}
	LWLockRelease(rl_lim_shared->lock);

	for (long j = 0; j < i; j++)
	{
		Datum		values[4];
		bool		nulls[4] = {!may_see, false, false, false};

		e = &copy[j];
		values[0] = may_see ? CStringGetTextDatum(e->k.key) : (Datum) 0;
		values[1] = CStringGetTextDatum(rl_algorithm_name(e->k.algorithm));
		values[2] = Int64GetDatum(e->denied);
		values[3] = TimestampTzGetDatum(e->last_denied);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(copy);
	return (Datum) 0;
}
