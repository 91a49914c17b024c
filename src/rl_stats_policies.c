/*-------------------------------------------------------------------------
 *
 * rl_stats_policies.c
 *	  Statistics per named policy: rl_stats_policies().
 *
 * A fixed table in shared memory of ratelimit.max_policies slots, one per
 * policy (database and name), taken at the policy's first call in any
 * backend (rl_policies.c asks when it caches the policy) and kept until
 * the server stops: the table is bounded by the number of policies, never
 * by keys.  When every slot is taken, further policies work as usual but
 * are not counted (their limiter's slot is 0), and the backend says so in
 * a WARNING once.  A slot's counters are atomics, added to by every
 * backend with no lock; the lock guards only the taking of a slot.
 * rl_stats_reset() zeroes the counters and keeps the slots.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_stats_policies.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/builtins.h"

#include "rl_stats.h"
#include "rl_store.h"

PG_FUNCTION_INFO_V1(rl_stats_policies);

/* The counters of a policy, in the order of rl_stats_policies' columns. */
typedef enum RlPolicyCounter
{
	RL_PC_CALLS,
	RL_PC_ALLOWED,
	RL_PC_DENIED,
	RL_PC_SHADOW_DENIED,
	RL_PC_FAIL_OPEN,
	RL_PC_FAIL_CLOSED,
	RL_PC_FAIL_ERROR,
	RL_PC_FAIL_LOCAL,
	RL_PC_COUNT
} RlPolicyCounter;

typedef struct RlPolicySlot
{
	Oid			dbid;			/* written once, under the lock */
	char		name[RL_MAX_POLICY_NAME + 1];
	pg_atomic_uint64 counts[RL_PC_COUNT];
} RlPolicySlot;

typedef struct RlPolicyShared
{
	LWLock	   *lock;			/* taking a slot */
	pg_atomic_uint32 used;		/* slots taken, in order */
	int			max;
	RlPolicySlot slots[FLEXIBLE_ARRAY_MEMBER];
} RlPolicyShared;

static RlPolicyShared *rl_pol_shared = NULL;

/* The table's size. */
static Size
rl_stats_policies_size(void)
{
	return add_size(offsetof(RlPolicyShared, slots),
					mul_size(rl_max_policies, sizeof(RlPolicySlot)));
}

/* shmem_request_hook (via rl_stats.c): the table and its lock. */
void
rl_stats_policies_request(void)
{
	RequestAddinShmemSpace(rl_stats_policies_size());
	RequestNamedLWLockTranche("ratelimit_policies", 1);
}

/* shmem_startup_hook (via rl_stats.c), under AddinShmemInitLock. */
void
rl_stats_policies_startup(void)
{
	bool		found;

	rl_pol_shared = ShmemInitStruct("ratelimit_policies",
									rl_stats_policies_size(), &found);
	if (!found)
	{
		memset(rl_pol_shared, 0, rl_stats_policies_size());
		rl_pol_shared->lock =
			&(GetNamedLWLockTranche("ratelimit_policies"))->lock;
		pg_atomic_init_u32(&rl_pol_shared->used, 0);
		rl_pol_shared->max = rl_max_policies;
		for (int i = 0; i < rl_max_policies; i++)
			for (int c = 0; c < RL_PC_COUNT; c++)
				pg_atomic_init_u64(&rl_pol_shared->slots[i].counts[c], 0);
	}
}

/* The slot of this database's policy name among the first n, or -1. */
static int
rl_stats_policy_find(const char *name, int n)
{
	for (int i = 0; i < n; i++)
	{
		RlPolicySlot *s = &rl_pol_shared->slots[i];

		if (s->dbid == MyDatabaseId && strcmp(s->name, name) == 0)
			return i;
	}
	return -1;
}

/*
 * The slot of a policy, from 1, taken if it has none; 0 when the table
 * is full (or the library was not preloaded): the policy is not counted.
 * Called when a backend caches a policy, never per call.
 */
int
rl_stats_policy_slot(const char *name)
{
	static bool warned = false;
	uint32		used;
	int			i;

	if (rl_pol_shared == NULL || strlen(name) > RL_MAX_POLICY_NAME)
		return 0;
	used = pg_atomic_read_u32(&rl_pol_shared->used);
	pg_read_barrier();
	i = rl_stats_policy_find(name, used);
	if (i >= 0)
		return i + 1;

	LWLockAcquire(rl_pol_shared->lock, LW_EXCLUSIVE);
	used = pg_atomic_read_u32(&rl_pol_shared->used);
	i = rl_stats_policy_find(name, used);
	if (i < 0 && used < rl_pol_shared->max)
	{
		RlPolicySlot *s = &rl_pol_shared->slots[used];

		s->dbid = MyDatabaseId;
		strlcpy(s->name, name, sizeof(s->name));
		for (int c = 0; c < RL_PC_COUNT; c++)
			pg_atomic_write_u64(&s->counts[c], 0);
		pg_write_barrier();
		pg_atomic_write_u32(&rl_pol_shared->used, used + 1);
		i = used;
	}
	LWLockRelease(rl_pol_shared->lock);
	if (i < 0 && !warned)
	{
		warned = true;
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("ratelimit.max_policies is full; policy \"%s\" is not counted in rl_stats_policies",
						name),
				 errdetail("Every policy called since the server started takes a slot, in every database."),
				 errhint("Raise ratelimit.max_policies (a restart is needed).")));
	}
	return i + 1;
}

static inline void
rl_stats_policy_add(int slot, RlPolicyCounter c)
{
	pg_atomic_fetch_add_u64(&rl_pol_shared->slots[slot - 1].counts[c], 1);
}

/*
 * Adds to the counters add[] of each distinct policy of a check's rules
 * (a rule of no policy, or of an uncounted one, has slot 0).
 */
static void
rl_stats_policy_each(const RlCheck *check, RlPolicyCounter *add, int nadd)
{
	int			n = check->uniform ? 1 : check->nrules;

	if (rl_pol_shared == NULL)
		return;
	for (int i = 0; i < n; i++)
	{
		int			slot = check->limiters[i].policy;
		bool		seen = false;

		if (slot <= 0 || slot > rl_pol_shared->max)
			continue;
		for (int j = 0; j < i && !seen; j++)
			seen = check->limiters[j].policy == slot;
		if (seen)
			continue;
		for (int k = 0; k < nadd; k++)
			rl_stats_policy_add(slot, add[k]);
	}
}

/*
 * A settled check that names a policy (rl_engine_settle asks), counted
 * for each of its policies: a call and its outcome, as rl_stats counts
 * it (the failure policy's open and closed answers are neither allowed
 * nor denied); shadow when the denial was let through.
 */
void
rl_stats_policy_check(const RlCheck *check, bool shadow)
{
	RlPolicyCounter add[4];
	int			n = 0;

	add[n++] = RL_PC_CALLS;
	if (!check->answer.known)
		add[n++] = check->answer.allowed ? RL_PC_FAIL_OPEN : RL_PC_FAIL_CLOSED;
	else
	{
		add[n++] = check->answer.allowed ? RL_PC_ALLOWED : RL_PC_DENIED;
		if (check->failed_over)
			add[n++] = RL_PC_FAIL_LOCAL;
	}
	if (shadow)
		add[n++] = RL_PC_SHADOW_DENIED;
	rl_stats_policy_each(check, add, n);
}

/* A check the failure policy raises for (failure_mode error): a call. */
void
rl_stats_policy_error(const RlCheck *check)
{
	RlPolicyCounter add[2] = {RL_PC_CALLS, RL_PC_FAIL_ERROR};

	rl_stats_policy_each(check, add, 2);
}

/* rl_stats_reset(): every policy's counters start over; slots stay. */
void
rl_stats_policies_reset(void)
{
	uint32		used;

	if (rl_pol_shared == NULL)
		return;
	used = pg_atomic_read_u32(&rl_pol_shared->used);
	for (uint32 i = 0; i < used; i++)
		for (int c = 0; c < RL_PC_COUNT; c++)
			pg_atomic_write_u64(&rl_pol_shared->slots[i].counts[c], 0);
}

/*
 * rl_stats_policies(): this database's policies that were called since
 * the server started, with their counts since then or rl_stats_reset().
 */
Datum
rl_stats_policies(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	uint32		used;

	rl_stats_require();
	InitMaterializedSRF(fcinfo, 0);
	if (rl_pol_shared == NULL)
		return (Datum) 0;
	used = pg_atomic_read_u32(&rl_pol_shared->used);
	pg_read_barrier();
	for (uint32 i = 0; i < used; i++)
	{
		RlPolicySlot *s = &rl_pol_shared->slots[i];
		Datum		values[1 + RL_PC_COUNT];
		bool		nulls[1 + RL_PC_COUNT] = {0};

		if (s->dbid != MyDatabaseId)
			continue;
		values[0] = CStringGetTextDatum(s->name);
		for (int c = 0; c < RL_PC_COUNT; c++)
			values[1 + c] =
				Int64GetDatum((int64) pg_atomic_read_u64(&s->counts[c]));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values,
							 nulls);
	}
	return (Datum) 0;
}
