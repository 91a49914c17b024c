/*-------------------------------------------------------------------------
 *
 * rl_stats.c
 *	  Server-wide statistics: rl_stats(), rl_stats_rtt(),
 *	  rl_stats_limiters() and rl_stats_reset().
 *
 * Every backend counts into its own slot of an array in shared memory,
 * indexed by MyBackendId: the RlCounters of ratelimit.h and a histogram
 * of Redis round-trip times.  Only the owner writes its slot, with plain
 * stores (aligned 64-bit stores are single-copy atomic on every platform
 * PostgreSQL 15 runs its own 64-bit atomics on); readers sum all slots
 * without a lock.  No backend ever waits for another to count a call.
 *
 * A slot is never cleared: the next backend with the same id keeps
 * adding to it, so the counts of backends that exited stay in the sums at
 * no cost at exit.  rl_status() shows this backend's own share: the slot
 * minus what it held when this backend first used it.  rl_stats_reset()
 * records the current sums as a baseline that readers subtract, so it
 * writes no other backend's slot.
 *
 * The limiters denying most are counted per backend first (a local hash
 * table of Redis key and algorithm) and added to a shared table, bounded
 * by ratelimit.stats_max_limiters, under one lock at most every
 * RL_STATS_FLUSH_MS, at a transaction's commit after that time, when the
 * backend reads rl_stats_limiters and when it exits.  A full table drops
 * its least-denied 5% to make room, as pg_stat_statements does.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_stats.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "port/pg_bitutils.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "rl_stats.h"

PG_FUNCTION_INFO_V1(rl_stats);
PG_FUNCTION_INFO_V1(rl_stats_rtt);
PG_FUNCTION_INFO_V1(rl_stats_limiters);
PG_FUNCTION_INFO_V1(rl_stats_reset);

/*
 * Round-trip histogram: below 4 us one bucket per microsecond, then four
 * buckets per power of two ([4,5) [5,6) [6,7) [7,8) << k), so a bucket is
 * at most a quarter of its lower bound wide, up to 2^30 us (about 18
 * minutes); the last bucket holds everything longer.
 */
#define RL_RTT_MAX_POW		30
#define RL_RTT_LAST			(4 * (RL_RTT_MAX_POW - 1))
#define RL_RTT_BUCKETS		(RL_RTT_LAST + 1)

/* Bytes of a limiter's Redis key kept; longer keys share an entry. */
#define RL_STATS_KEY_BYTES	256

/* A backend adds its limiter denials to the shared table this often. */
#define RL_STATS_FLUSH_MS	500

/* The columns of rl_stats(). */
#define RL_STATS_COLS		(18 + RL_NUM_FAIL_REASONS)

typedef struct RlStatsSlot
{
	RlCounters	counters;
	int64		rtt[RL_RTT_BUCKETS];
} RlStatsSlot;

#define RL_NUM_COUNTERS		(sizeof(RlCounters) / sizeof(int64))
#define RL_SLOT_STRIDE		CACHELINEALIGN(sizeof(RlStatsSlot))

StaticAssertDecl(sizeof(RlCounters) % sizeof(int64) == 0,
				 "RlCounters must hold int64 fields only");

typedef struct RlStatsShared
{
	LWLock	   *lock;			/* baseline, stats_reset, evicted, limiters */
	pg_atomic_uint64 generation;	/* bumped by each reset */
	TimestampTz stats_reset;
	int64		evicted;		/* limiter entries dropped for room */
	int			nslots;
	RlStatsSlot baseline;		/* the sums at the last reset */
} RlStatsShared;

typedef struct RlLimiterKey
{
	char		key[RL_STATS_KEY_BYTES];	/* zero-padded: hashed whole */
	int32		algorithm;
} RlLimiterKey;

typedef struct RlLimiterEntry
{
	RlLimiterKey k;
	int64		denied;
	TimestampTz last_denied;
} RlLimiterEntry;

static shmem_request_hook_type rl_prev_shmem_request_hook = NULL;
static shmem_startup_hook_type rl_prev_shmem_startup_hook = NULL;

static RlStatsShared *rl_stats_shared = NULL;
static char *rl_stats_slots = NULL;
static HTAB *rl_stats_table = NULL;

/* This backend's slot, or rl_local_slot when it has none. */
static RlStatsSlot *rl_my_slot = NULL;
static RlStatsSlot rl_local_slot;
static RlCounters rl_status_base;
RlCounters *rl_my_counters = NULL;

/* Denials not yet added to the shared table, and of which reset. */
static HTAB *rl_pending = NULL;
static uint64 rl_pending_generation = 0;
static TimestampTz rl_last_flush = 0;
static RlLimiterEntry *rl_pending_last = NULL;	/* the last one counted */

static void rl_stats_flush(TimestampTz now);

static RlStatsSlot *
rl_slot(int i)
{
	return (RlStatsSlot *) (rl_stats_slots + (Size) i * RL_SLOT_STRIDE);
}

/* The header and the slots, cache-line aligned so no two slots share one. */
static Size
rl_stats_struct_size(void)
{
	return add_size(CACHELINEALIGN(sizeof(RlStatsShared)) + PG_CACHE_LINE_SIZE,
					mul_size(MaxBackends, RL_SLOT_STRIDE));
}

/* Asks the postmaster for the slots, the limiter table and the lock. */
static void
rl_stats_shmem_request(void)
{
	if (rl_prev_shmem_request_hook)
		rl_prev_shmem_request_hook();
	RequestAddinShmemSpace(add_size(rl_stats_struct_size(),
									hash_estimate_size(rl_stats_max_limiters,
													   sizeof(RlLimiterEntry))));
	RequestNamedLWLockTranche("ratelimit_stats", 1);
}

/* Lays out shared memory once; every backend inherits the pointers. */
static void
rl_stats_shmem_startup(void)
{
	HASHCTL		info;
	bool		found;

	if (rl_prev_shmem_startup_hook)
		rl_prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	rl_stats_shared = ShmemInitStruct("ratelimit_stats", rl_stats_struct_size(),
									  &found);
	if (!found)
	{
		memset(rl_stats_shared, 0, rl_stats_struct_size());
		rl_stats_shared->lock = &(GetNamedLWLockTranche("ratelimit_stats"))->lock;
		pg_atomic_init_u64(&rl_stats_shared->generation, 0);
		rl_stats_shared->stats_reset = GetCurrentTimestamp();
		rl_stats_shared->nslots = MaxBackends;
	}
	rl_stats_slots = (char *) CACHELINEALIGN((char *) rl_stats_shared +
											 sizeof(RlStatsShared));
	info.keysize = sizeof(RlLimiterKey);
	info.entrysize = sizeof(RlLimiterEntry);
	rl_stats_table = ShmemInitHash("ratelimit_stats limiters",
								   rl_stats_max_limiters, rl_stats_max_limiters,
								   &info, HASH_ELEM | HASH_BLOBS);
	LWLockRelease(AddinShmemInitLock);
}

/* Called from _PG_init when the library is preloaded. */
void
rl_stats_init(void)
{
	rl_prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = rl_stats_shmem_request;
	rl_prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = rl_stats_shmem_startup;
}

/* At exit: this backend's pending limiter denials go to the shared table. */
static void
rl_stats_exit(int code, Datum arg)
{
	if (rl_pending != NULL && !LWLockHeldByMe(rl_stats_shared->lock))
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

	if (event != XACT_EVENT_COMMIT || rl_pending == NULL)
		return;
	now = GetCurrentTimestamp();
	if (TimestampDifferenceExceeds(rl_last_flush, now, RL_STATS_FLUSH_MS))
		rl_stats_flush(now);
}

/*
 * Finds this backend's slot, on its first counted call.  A process with
 * no backend id, or a library loaded late, counts into a local slot that
 * only rl_status() sees.
 */
void
rl_stats_attach(void)
{
	if (rl_stats_shared != NULL && MyBackendId >= 1 &&
		MyBackendId <= rl_stats_shared->nslots)
	{
		rl_my_slot = rl_slot(MyBackendId - 1);
		before_shmem_exit(rl_stats_exit, (Datum) 0);
		RegisterXactCallback(rl_stats_xact, NULL);
	}
	else
		rl_my_slot = &rl_local_slot;
	rl_my_counters = &rl_my_slot->counters;
	rl_status_base = rl_my_slot->counters;
}

/* What this backend counted (rl_status()). */
void
rl_stats_backend_counters(RlCounters *out)
{
	const int64 *now = (const int64 *) rl_counters_ptr();
	const int64 *base = (const int64 *) &rl_status_base;
	int64	   *o = (int64 *) out;

	for (int i = 0; i < RL_NUM_COUNTERS; i++)
		o[i] = now[i] - base[i];
}

/*
 * Counts a failure under its reason, read from the failure's message
 * (rl_conn.c and rl_scripts.c word them; a new wording that matches none
 * of these prefixes counts as "unavailable").
 */
void
rl_stats_failure(const char *setting, const char *what)
{
	RlFailReason reason;

	if (setting != NULL)
		reason = RL_FAILED_MISCONFIGURED;
	else if (strncmp(what, "timed out", 9) == 0)
		reason = RL_FAILED_TIMEOUT;
	else if (strncmp(what, "could not connect", 17) == 0)
		reason = RL_FAILED_CONNECT;
	else if (strncmp(what, "Redis refused the connection", 28) == 0)
		reason = RL_FAILED_REFUSED;
	else if (strncmp(what, "unexpected reply", 16) == 0 ||
			 strncmp(what, "Redis sent", 10) == 0 ||
			 strncmp(what, "could not parse", 15) == 0)
		reason = RL_FAILED_PROTOCOL;
	else if (strncmp(what, "could not", 9) == 0 ||
			 strncmp(what, "Redis closed", 12) == 0)
		reason = RL_FAILED_LOST;
	else
		reason = RL_FAILED_UNAVAILABLE;
	rl_counters.failed[reason]++;
}

/* The bucket of a round trip of us microseconds. */
static int
rl_rtt_bucket(int64 us)
{
	int			k;

	if (us < 4)
		return us < 0 ? 0 : (int) us;
	if (us >= (INT64CONST(1) << RL_RTT_MAX_POW))
		return RL_RTT_LAST;
	k = pg_leftmost_one_pos64((uint64) us);
	return 4 * (k - 1) + (int) ((us >> (k - 2)) & 3);
}

/* The lower bound of bucket b, in microseconds. */
static int64
rl_rtt_lower(int b)
{
	if (b < 4)
		return b;
	if (b == RL_RTT_LAST)
		return INT64CONST(1) << RL_RTT_MAX_POW;
	return (int64) (4 + b % 4) << (b / 4 - 1);
}

/* The upper bound of bucket b (exclusive); -1 for the last, unbounded. */
static int64
rl_rtt_upper(int b)
{
	if (b < 4)
		return b + 1;
	if (b == RL_RTT_LAST)
		return -1;
	return (int64) (5 + b % 4) << (b / 4 - 1);
}

/* Marks the start of a round trip (nothing when ratelimit.stats is off). */
void
rl_stats_rtt_start(instr_time *start)
{
	if (rl_stats_enabled)
		INSTR_TIME_SET_CURRENT(*start);
	else
		INSTR_TIME_SET_ZERO(*start);
}

/* Counts a round trip that got its replies. */
void
rl_stats_rtt_end(const instr_time *start)
{
	instr_time	took;

	if (INSTR_TIME_IS_ZERO(*start))
		return;
	INSTR_TIME_SET_CURRENT(took);
	INSTR_TIME_SUBTRACT(took, *start);
	(void) rl_counters_ptr();
	rl_my_slot->rtt[rl_rtt_bucket((int64) INSTR_TIME_GET_MICROSEC(took))]++;
}

/* Forgets the pending denials (a reset happened since they were counted). */
static void
rl_pending_drop(void)
{
	if (rl_pending != NULL)
		hash_destroy(rl_pending);
	rl_pending = NULL;
	rl_pending_last = NULL;
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
	bool		found;
	TimestampTz now;
	uint64		generation;

	if (!rl_stats_enabled || rl_stats_shared == NULL)
		return;
	(void) rl_counters_ptr();
	if (rl_my_slot == &rl_local_slot)
		return;
	generation = pg_atomic_read_u64(&rl_stats_shared->generation);
	if (rl_pending != NULL && rl_pending_generation != generation)
		rl_pending_drop();
	if (rl_pending == NULL)
	{
		HASHCTL		info;

		info.keysize = sizeof(RlLimiterKey);
		info.entrysize = sizeof(RlLimiterEntry);
		info.hcxt = TopMemoryContext;
		rl_pending = hash_create("ratelimit pending denials", 64, &info,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		rl_pending_generation = generation;
		e = NULL;
	}
	if (e == NULL || e->k.algorithm != algorithm ||
		strcmp(e->k.key, redis_key) != 0)
	{
		memset(&k, 0, sizeof(k));
		memcpy(k.key, redis_key,
			   pg_mbcliplen(redis_key, strlen(redis_key), RL_STATS_KEY_BYTES - 1));
		k.algorithm = algorithm;
		e = hash_search(rl_pending, &k, HASH_ENTER, &found);
		if (!found)
			e->denied = 0;
		rl_pending_last = e;
	}
	e->denied++;
	now = GetCurrentStatementStartTimestamp();
	e->last_denied = now;
	if (hash_get_num_entries(rl_pending) >= rl_stats_max_limiters ||
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
	long		n = hash_get_num_entries(rl_stats_table);
	RlLimiterEntry **all;
	HASH_SEQ_STATUS seq;
	RlLimiterEntry *e;
	long		i = 0;
	long		victims = Max(1, n / 20);

	all = palloc_extended(sizeof(RlLimiterEntry *) * Max(n, 1), MCXT_ALLOC_NO_OOM);
	if (all == NULL)
		return;
	hash_seq_init(&seq, rl_stats_table);
	while ((e = hash_seq_search(&seq)) != NULL)
		all[i++] = e;
	qsort(all, i, sizeof(RlLimiterEntry *), rl_entry_cmp);
	victims = Min(victims, i);
	for (long j = 0; j < victims; j++)
		hash_search(rl_stats_table, &all[j]->k, HASH_REMOVE, NULL);
	rl_stats_shared->evicted += victims;
	pfree(all);
}

/* Adds this backend's pending denials to the shared table. */
static void
rl_stats_flush(TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	RlLimiterEntry *e;

	rl_last_flush = now;
	if (rl_pending == NULL)
		return;
	LWLockAcquire(rl_stats_shared->lock, LW_EXCLUSIVE);
	if (pg_atomic_read_u64(&rl_stats_shared->generation) == rl_pending_generation)
	{
		hash_seq_init(&seq, rl_pending);
		while ((e = hash_seq_search(&seq)) != NULL)
		{
			RlLimiterEntry *s;
			bool		found;

			s = hash_search(rl_stats_table, &e->k, HASH_FIND, NULL);
			if (s == NULL)
			{
				if (hash_get_num_entries(rl_stats_table) >= rl_stats_max_limiters)
					rl_stats_evict();
				s = hash_search(rl_stats_table, &e->k, HASH_ENTER_NULL, &found);
				if (s == NULL)
					continue;
				s->denied = 0;
				s->last_denied = 0;
			}
			s->denied += e->denied;
			s->last_denied = Max(s->last_denied, e->last_denied);
		}
	}
	LWLockRelease(rl_stats_shared->lock);
	rl_pending_drop();
}

/* The sums over every slot, minus the baseline of the last reset. */
static void
rl_stats_sum(RlStatsSlot *sum, TimestampTz *reset, int64 *evicted)
{
	int64	   *out = (int64 *) sum;
	const int	nwords = sizeof(RlStatsSlot) / sizeof(int64);

	StaticAssertStmt(sizeof(RlStatsSlot) % sizeof(int64) == 0,
					 "a slot must hold int64 fields only");
	memset(sum, 0, sizeof(*sum));
	for (int s = 0; s < rl_stats_shared->nslots; s++)
	{
		const volatile int64 *in = (const volatile int64 *) rl_slot(s);

		for (int i = 0; i < nwords; i++)
			out[i] += in[i];
	}
	LWLockAcquire(rl_stats_shared->lock, LW_SHARED);
	for (int i = 0; i < nwords; i++)
		out[i] = Max(0, out[i] - ((int64 *) &rl_stats_shared->baseline)[i]);
	*reset = rl_stats_shared->stats_reset;
	*evicted = rl_stats_shared->evicted;
	LWLockRelease(rl_stats_shared->lock);
}

/* Refuses the statistics functions when the library was not preloaded. */
static void
rl_stats_require(void)
{
	rl_require_preload();
	if (rl_stats_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ratelimit statistics are not available"),
				 errdetail("The shared memory for them was not set up at server start.")));
}

/*
 * The upper bound, in milliseconds, of the bucket holding the round trip
 * of rank ceil(permille/1000 * total); NULL before any round trip.
 */
static Datum
rl_rtt_percentile(const int64 *rtt, int64 total, int permille, bool *isnull)
{
	int64		rank = (total * permille + 999) / 1000;
	int64		seen = 0;

	*isnull = total == 0;
	if (total == 0)
		return (Datum) 0;
	rank = Max(rank, 1);
	for (int b = 0; b < RL_RTT_BUCKETS; b++)
	{
		seen += rtt[b];
		if (seen >= rank)
			return Float8GetDatum((b == RL_RTT_LAST ? rl_rtt_lower(b) :
								   rl_rtt_upper(b)) / 1000.0);
	}
	return Float8GetDatum(rl_rtt_lower(RL_RTT_LAST) / 1000.0);
}

/* rl_stats(): one row of server-wide counts (the view rl_stats). */
Datum
rl_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[RL_STATS_COLS];
	bool		nulls[RL_STATS_COLS] = {0};
	RlStatsSlot sum;
	RlCounters *c = &sum.counters;
	TimestampTz reset;
	int64		evicted;
	int64		trips = 0;
	int			i = 0;

	rl_stats_require();
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	desc = BlessTupleDesc(desc);
	rl_stats_sum(&sum, &reset, &evicted);
	for (int b = 0; b < RL_RTT_BUCKETS; b++)
		trips += sum.rtt[b];

	values[i++] = Int64GetDatum(c->calls);
	values[i++] = Int64GetDatum(c->allowed);
	values[i++] = Int64GetDatum(c->denied);
	values[i++] = Int64GetDatum(c->shadow_denied);
	values[i++] = Int64GetDatum(c->cached);
	values[i++] = Int64GetDatum(c->fail_open);
	values[i++] = Int64GetDatum(c->fail_closed);
	values[i++] = Int64GetDatum(c->failures);
	for (int r = 0; r < RL_NUM_FAIL_REASONS; r++)
		values[i++] = Int64GetDatum(c->failed[r]);
	values[i++] = Int64GetDatum(c->connects);
	values[i++] = Int64GetDatum(c->script_loads);
	values[i++] = Int64GetDatum(c->redirects);
	values[i++] = Int64GetDatum(trips);
	values[i] = rl_rtt_percentile(sum.rtt, trips, 500, &nulls[i]);
	i++;
	values[i] = rl_rtt_percentile(sum.rtt, trips, 990, &nulls[i]);
	i++;
	values[i] = rl_rtt_percentile(sum.rtt, trips, 999, &nulls[i]);
	i++;
	values[i++] = Int64GetDatum(evicted);
	values[i++] = Int64GetDatum(hash_get_num_entries(rl_stats_table));
	values[i++] = TimestampTzGetDatum(reset);
	Assert(i == RL_STATS_COLS);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/* rl_stats_rtt(): the histogram's non-empty buckets (the view rl_stats_rtt). */
Datum
rl_stats_rtt(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RlStatsSlot sum;
	TimestampTz reset;
	int64		evicted;

	rl_stats_require();
	InitMaterializedSRF(fcinfo, 0);
	rl_stats_sum(&sum, &reset, &evicted);
	for (int b = 0; b < RL_RTT_BUCKETS; b++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, rl_rtt_upper(b) < 0, false};

		if (sum.rtt[b] == 0)
			continue;
		values[0] = Int64GetDatum(rl_rtt_lower(b));
		values[1] = Int64GetDatum(rl_rtt_upper(b));
		values[2] = Int64GetDatum(sum.rtt[b]);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * rl_stats_limiters(): the shared table (the view rl_stats_limiters).
 * Keys name callers and tenants, so only superusers and members of
 * pg_read_all_stats see them, as with pg_stat_statements' query text;
 * other readers get NULL keys with the algorithm and counts.
 */
Datum
rl_stats_limiters(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		may_see = superuser() ||
		has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	HASH_SEQ_STATUS seq;
	RlLimiterEntry *e;

	rl_stats_require();
	InitMaterializedSRF(fcinfo, 0);
	if (rl_pending != NULL &&
		rl_pending_generation != pg_atomic_read_u64(&rl_stats_shared->generation))
		rl_pending_drop();
	rl_stats_flush(GetCurrentTimestamp());
	LWLockAcquire(rl_stats_shared->lock, LW_SHARED);
	hash_seq_init(&seq, rl_stats_table);
	while ((e = hash_seq_search(&seq)) != NULL)
	{
		Datum		values[4];
		bool		nulls[4] = {!may_see, false, false, false};

		values[0] = may_see ? CStringGetTextDatum(e->k.key) : (Datum) 0;
		values[1] = CStringGetTextDatum(rl_algorithm_name(e->k.algorithm));
		values[2] = Int64GetDatum(e->denied);
		values[3] = TimestampTzGetDatum(e->last_denied);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	LWLockRelease(rl_stats_shared->lock);
	return (Datum) 0;
}

/*
 * rl_stats_reset(): starts every server-wide count over.  The current
 * sums become the baseline readers subtract; the limiter table empties.
 * Other backends' pending denials are dropped at their next flush (the
 * generation changed).  Executable by superusers only (no grant).
 */
Datum
rl_stats_reset(PG_FUNCTION_ARGS)
{
	RlStatsSlot sum;
	HASH_SEQ_STATUS seq;
	RlLimiterEntry *e;
	const int	nwords = sizeof(RlStatsSlot) / sizeof(int64);

	rl_stats_require();
	LWLockAcquire(rl_stats_shared->lock, LW_EXCLUSIVE);
	memset(&sum, 0, sizeof(sum));
	for (int s = 0; s < rl_stats_shared->nslots; s++)
	{
		const volatile int64 *in = (const volatile int64 *) rl_slot(s);

		for (int i = 0; i < nwords; i++)
			((int64 *) &sum)[i] += in[i];
	}
	rl_stats_shared->baseline = sum;
	rl_stats_shared->stats_reset = GetCurrentTimestamp();
	rl_stats_shared->evicted = 0;
	hash_seq_init(&seq, rl_stats_table);
	while ((e = hash_seq_search(&seq)) != NULL)
		hash_search(rl_stats_table, &e->k, HASH_REMOVE, NULL);
	pg_atomic_fetch_add_u64(&rl_stats_shared->generation, 1);
	LWLockRelease(rl_stats_shared->lock);
	rl_pending_drop();
	PG_RETURN_VOID();
}
