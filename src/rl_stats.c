/*-------------------------------------------------------------------------
 *
 * rl_stats.c
 *	  Server-wide statistics: the per-backend slots in shared memory,
 *	  rl_stats(), rl_stats_rtt() and rl_stats_reset().
 *
 * Every backend counts into its own slot of an array in shared memory,
 * indexed by its number among the backends (rl_backend_number): the
 * RlCounters of rl_types.h and a histogram of Redis round-trip times.
 * Only the owner writes its slot, with plain stores (aligned 64-bit
 * stores are single-copy atomic on every platform PostgreSQL 15 runs its
 * own 64-bit atomics on); readers sum all slots without a lock.  No
 * backend ever waits for another to count a call.
 *
 * A slot is never cleared: the next backend with the same id keeps
 * adding to it, so the counts of backends that exited stay in the sums at
 * no cost at exit.  rl_status() shows this backend's own share: the slot
 * minus what it held when this backend first used it.  rl_stats_reset()
 * records the current sums as a baseline that readers subtract, so it
 * writes no other backend's slot.
 *
 * The limiters denying most are rl_stats_limiters.c's.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_stats.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "miscadmin.h"
#include "port/pg_bitutils.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "rl_compat.h"
#include "rl_stats.h"

PG_FUNCTION_INFO_V1(rl_stats);
PG_FUNCTION_INFO_V1(rl_stats_rtt);
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

/* The columns of rl_stats(). */
#define RL_STATS_COLS		(21 + RL_NUM_FAIL_REASONS)
/* rl_stats() of a catalog not yet updated to 0.6.0: no refunds columns. */
#define RL_STATS_COLS_0_5	(19 + RL_NUM_FAIL_REASONS)

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
	LWLock	   *lock;			/* baseline and stats_reset */
	TimestampTz stats_reset;
	int			nslots;
	RlStatsSlot baseline;		/* the sums at the last reset */
} RlStatsShared;

static shmem_request_hook_type rl_prev_shmem_request_hook = NULL;
static shmem_startup_hook_type rl_prev_shmem_startup_hook = NULL;

static RlStatsShared *rl_stats_shared = NULL;
static char *rl_stats_slots = NULL;

/* This backend's slot, or rl_local_slot when it has none. */
static RlStatsSlot *rl_my_slot = NULL;
static RlStatsSlot rl_local_slot;
static RlCounters rl_status_base;
RlCounters *rl_my_counters = NULL;

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
	RequestAddinShmemSpace(rl_stats_struct_size());
	RequestNamedLWLockTranche("ratelimit_stats", 1);
	rl_stats_limiters_request();
	rl_stats_policies_request();
}

/* Lays out shared memory once; every backend inherits the pointers. */
static void
rl_stats_shmem_startup(void)
{
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
		rl_stats_shared->stats_reset = GetCurrentTimestamp();
		rl_stats_shared->nslots = MaxBackends;
	}
	rl_stats_slots = (char *) CACHELINEALIGN((char *) rl_stats_shared +
											 sizeof(RlStatsShared));
	rl_stats_limiters_startup();
	rl_stats_policies_startup();
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

/*
 * Finds this backend's slot, on its first counted call.  A process with
 * no backend id, or a library loaded late, counts into a local slot that
 * only rl_status() sees.
 */
void
rl_stats_attach(void)
{
	int			id = rl_backend_number();

	if (rl_stats_shared != NULL && id >= 1 && id <= rl_stats_shared->nslots)
	{
		rl_my_slot = rl_slot(id - 1);
		rl_stats_limiters_attach();
	}
	else
		rl_my_slot = &rl_local_slot;
	rl_my_counters = &rl_my_slot->counters;
	rl_status_base = rl_my_slot->counters;
}

/* True when this backend counts into a shared slot. */
bool
rl_stats_have_slot(void)
{
	(void) rl_counters_ptr();
	return rl_my_slot != &rl_local_slot;
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
 * Counts a failure under its reason, as the store named it where it
 * happened; the local table full is counted under failures only.
 */
void
rl_stats_failure(RlFailReason reason)
{
	if (reason >= 0 && reason < RL_NUM_FAIL_REASONS)
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

/* The sums over every slot, minus the baseline of the last reset. */
static void
rl_stats_sum(RlStatsSlot *sum, TimestampTz *reset)
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
	LWLockRelease(rl_stats_shared->lock);
}

/* Refuses the statistics functions when the library was not preloaded. */
void
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
	int64		entries;
	int64		trips = 0;
	int			i = 0;

	rl_stats_require();
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	desc = BlessTupleDesc(desc);
	rl_stats_sum(&sum, &reset);
	rl_stats_limiters_counts(&entries, &evicted);
	for (int b = 0; b < RL_RTT_BUCKETS; b++)
		trips += sum.rtt[b];

	values[i++] = Int64GetDatum(c->calls);
	values[i++] = Int64GetDatum(c->allowed);
	values[i++] = Int64GetDatum(c->denied);
	values[i++] = Int64GetDatum(c->shadow_denied);
	values[i++] = Int64GetDatum(c->cached);
	values[i++] = Int64GetDatum(c->fail_open);
	values[i++] = Int64GetDatum(c->fail_closed);
	values[i++] = Int64GetDatum(c->fail_local);
	if (desc->natts != RL_STATS_COLS_0_5)
	{
		values[i++] = Int64GetDatum(c->refunds);
		values[i++] = Int64GetDatum(c->refunds_lost);
	}
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
	values[i++] = Int64GetDatum(entries);
	values[i++] = TimestampTzGetDatum(reset);
	if (i != desc->natts)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("rl_stats() has %d columns in the catalog, not %d", desc->natts, i),
				 errhint("Run ALTER EXTENSION ratelimit UPDATE.")));
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/* rl_stats_rtt(): the histogram's non-empty buckets (the view rl_stats_rtt). */
Datum
rl_stats_rtt(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RlStatsSlot sum;
	TimestampTz reset;

	rl_stats_require();
	InitMaterializedSRF(fcinfo, 0);
	rl_stats_sum(&sum, &reset);
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
 * rl_stats_reset(): starts every server-wide count over.  The current
 * sums become the baseline readers subtract, so no other backend's slot
 * is written; the limiter table empties.  Executable by superusers only
 * (granted to no one).
 */
Datum
rl_stats_reset(PG_FUNCTION_ARGS)
{
	RlStatsSlot sum;
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
	LWLockRelease(rl_stats_shared->lock);
	rl_stats_limiters_reset();
	rl_stats_policies_reset();
	PG_RETURN_VOID();
}
