/*-------------------------------------------------------------------------
 *
 * rl_groups.c
 *	  A statement's rows, grouped by rate limit key.
 *
 * The statement trigger (rl_trigger_statement.c) charges each key once
 * per statement with the sum of its rows' costs.  Rows arrive one at a
 * time, read back from a transition table or handed over by a row
 * trigger; this file sums them.  Rows are grouped by their key column
 * values, compared as stored (detoasted), so a row costs a hash of its
 * key columns and no text.  The limiter key text is made once per group
 * at the end, and groups whose texts coincide (the same value stored two
 * ways) are merged, so no key reaches Redis twice.
 *
 * Errors come before anything is sent to Redis: too many keys, or a key
 * whose rows alone exceed the limit.  Rows of a single by-value key (the
 * usual integer column) are counted RL_HELD_ROWS at a time, so such an
 * error comes within that many rows, or when the statement ends.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/trigger/rl_groups.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "common/hashfn.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "rl_trigger.h"

/*
 * Distinct keys per statement.  rl_trigger_statement.c checks them 64
 * per script run, so no script blocks Redis for long; the cap bounds the
 * round trips (157; against a cluster, one script per hash slot, 1000
 * scripts per round trip, two rounds: 20) and the memory one statement
 * takes.
 */
#define RL_MAX_STATEMENT_KEYS	10000

/* Rows of a single by-value key held back to be counted in one loop. */
#define RL_HELD_ROWS	256

/* A NULL key column's share of a row's hash. */
#define RL_NULL_HASH	0x9e3779b9

/*
 * A row's key, as the hash table sees it: the hash, the first key value
 * (so the usual single integer key compares without following a
 * pointer), and the index of the group that holds all the values, or -1
 * for the row being looked up, whose values are in probe_values.  An
 * entry is 32 bytes: a statement with a thousand keys probes a table that
 * stays in cache while the rows stream past it.
 */
typedef struct RlRowKey
{
	Datum		first;
	uint32		hash;
	int32		group;
	bool		firstnull;
} RlRowKey;

typedef struct RlRowEntry
{
	RlRowKey	key;
	char		status;			/* simplehash's */
} RlRowEntry;

static inline bool rl_rowkey_equal(const RlGroups *groups, const RlRowKey *a,
								   const RlRowKey *b);

#define SH_PREFIX rl_rows
#define SH_ELEMENT_TYPE RlRowEntry
#define SH_KEY_TYPE RlRowKey
#define SH_KEY key
#define SH_HASH_KEY(tb, k) ((k).hash)
#define SH_EQUAL(tb, a, b) rl_rowkey_equal((tb)->private_data, &(a), &(b))
#define SH_STORE_HASH
#define SH_GET_HASH(tb, a) ((a)->key.hash)
#define SH_SCOPE static inline
#define SH_DECLARE
#define SH_DEFINE
#include "lib/simplehash.h"

struct RlGroups
{
	MemoryContext cxt;			/* all of the below */
	MemoryContext rowcxt;		/* one row's detoasted values */
	bool		rowcxt_used;
	int			ncols;
	int16	   *typlen;
	bool	   *byval;
	bool		one_byval;		/* one key column, passed by value */
	rl_rows_hash *byvalue;
	RlGroup   **order;			/* groups in the order keys first appear */
	int64	   *costs;			/* their costs, summed here while rows come */
	int			n;
	int			allocated;
	Datum	   *probe_values;	/* the row being looked up */
	bool	   *probe_nulls;
	/* Rows held back to be counted together (a single by-value key). */
	int			nheld;
	Datum		held_values[RL_HELD_ROWS];
	int64		held_costs[RL_HELD_ROWS];
	bool		held_nulls[RL_HELD_ROWS];
};

/* The bytes a value is compared by: the datum, or what it points to. */
static const void *
rl_value_bytes(const RlGroups *groups, const Datum *value, int col, Size *len)
{
	if (groups->byval[col])
	{
		*len = sizeof(Datum);
		return value;
	}
	if (groups->typlen[col] == -1)
	{
		struct varlena *v = (struct varlena *) DatumGetPointer(*value);

		*len = VARSIZE_ANY_EXHDR(v);
		return VARDATA_ANY(v);
	}
	if (groups->typlen[col] == -2)
	{
		*len = strlen(DatumGetCString(*value));
		return DatumGetPointer(*value);
	}
	*len = groups->typlen[col];
	return DatumGetPointer(*value);
}

/* Called only for keys of equal hash. */
static inline bool
rl_rowkey_equal(const RlGroups *groups, const RlRowKey *a, const RlRowKey *b)
{
	const Datum *va;
	const Datum *vb;
	const bool *na;
	const bool *nb;

	if (a->firstnull != b->firstnull ||
		(groups->byval[0] && !a->firstnull && a->first != b->first))
		return false;
	if (groups->one_byval)
		return true;
	va = a->group < 0 ? groups->probe_values : groups->order[a->group]->values;
	na = a->group < 0 ? groups->probe_nulls : groups->order[a->group]->nulls;
	vb = b->group < 0 ? groups->probe_values : groups->order[b->group]->values;
	nb = b->group < 0 ? groups->probe_nulls : groups->order[b->group]->nulls;
	for (int i = 0; i < groups->ncols; i++)
	{
		const void *pa;
		const void *pb;
		Size		la;
		Size		lb;

		if (na[i] != nb[i])
			return false;
		if (na[i])
			continue;
		if (groups->byval[i])
		{
			if (va[i] != vb[i])
				return false;
			continue;
		}
		pa = rl_value_bytes(groups, &va[i], i, &la);
		pb = rl_value_bytes(groups, &vb[i], i, &lb);
		if (la != lb || memcmp(pa, pb, la) != 0)
			return false;
	}
	return true;
}

/* Groups of the second level are found by their limiter key text. */
static uint32
rl_group_hash(const void *key, Size keysize)
{
	const char *s = *(char *const *) key;

	return hash_bytes((const unsigned char *) s, strlen(s));
}

static int
rl_group_match(const void *key1, const void *key2, Size keysize)
{
	return strcmp(*(char *const *) key1, *(char *const *) key2);
}

/*
 * The (col, ...)=(value, ...) text of a group, for messages only, so it
 * is made only when one is raised.
 */
char *
rl_group_desc(RlTriggerConf *conf, RlGroup *group)
{
	StringInfoData key;
	StringInfoData desc;

	initStringInfo(&key);
	initStringInfo(&desc);
	rl_trigger_key_values(conf, group->values, group->nulls, &key, &desc);
	return desc.data;
}

/*
 * A key whose rows alone exceed the limit: no wait can help it, so the
 * statement fails before Redis is asked.  Inside PostgREST the 429 says
 * to wait a window, the least that could help a smaller retry.
 */
static void
rl_group_too_big(RlTriggerConf *conf, RlGroup *group)
{
	RlAnswer	answer = {0};
	char	   *desc;
	char	   *detail;

	/*
	 * Shadow mode lets the statement through; the key is kept just past
	 * its limit (no sum can overflow) and rl_check_groups counts it as the
	 * denial it is, without sending it.
	 */
	if (!rl_enforce || conf->limiter.shadow)
	{
		group->cost = rl_capacity(&conf->limiter) + 1;
		return;
	}
	desc = rl_group_desc(conf, group);

	if (!rl_trigger_may_read(conf, false))
		detail = psprintf("The statement's rows for one key cost more than " INT64_FORMAT " in total, which no window can admit.",
						  rl_capacity(&conf->limiter));
	else if (conf->costcol == 0)
		detail = psprintf("The statement writes more than " INT64_FORMAT " rows for key %s, which no window can admit.",
						  rl_capacity(&conf->limiter), desc);
	else
		detail = psprintf("The statement's rows for key %s cost more than " INT64_FORMAT " in total (column \"%s\"), which no window can admit.",
						  desc, rl_capacity(&conf->limiter), conf->costname);
	answer.known = false;
	answer.retry_after_ms = (conf->limiter.window_us + 999) / 1000;
	rl_trigger_raise(conf, detail,
					 psprintf("Trigger \"%s\" limits the rows written per key; split the statement into smaller ones.",
							  conf->trigger),
					 &answer);
}

/*
 * An empty set of groups for rows of the given shape, in a memory
 * context of its own under parent: deleting it frees everything.
 */
RlGroups *
rl_groups_create(RlTriggerConf *conf, TupleDesc tupdesc, MemoryContext parent)
{
	MemoryContext cxt = AllocSetContextCreate(parent, "ratelimit statement rows",
											  ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(cxt);
	RlGroups   *groups = palloc0(sizeof(RlGroups));

	groups->cxt = cxt;
	groups->rowcxt = AllocSetContextCreate(cxt, "ratelimit row",
										   ALLOCSET_SMALL_SIZES);
	groups->ncols = conf->ncols;
	groups->one_byval = conf->ncols == 1 &&
		TupleDescAttr(tupdesc, conf->cols[0] - 1)->attbyval;
	groups->typlen = palloc(sizeof(int16) * conf->ncols);
	groups->byval = palloc(sizeof(bool) * conf->ncols);
	for (int i = 0; i < conf->ncols; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tupdesc, conf->cols[i] - 1);

		groups->typlen[i] = att->attlen;
		groups->byval[i] = att->attbyval;
	}
	groups->probe_values = palloc(sizeof(Datum) * conf->ncols);
	groups->probe_nulls = palloc(sizeof(bool) * conf->ncols);

	groups->byvalue = rl_rows_create(cxt, 256, groups);
	groups->allocated = 64;
	groups->order = palloc(sizeof(RlGroup *) * groups->allocated);
	groups->costs = palloc(sizeof(int64) * groups->allocated);
	MemoryContextSwitchTo(old);
	return groups;
}

MemoryContext
rl_groups_context(RlGroups *groups)
{
	return groups->cxt;
}

/*
 * A column of the row.  A row trigger's row is a heap tuple as well as a
 * slot: reading the column from the tuple (at a cached offset, for the
 * usual fixed-width columns) spares deforming the slot for every row.
 */
static inline Datum
rl_row_value(TupleTableSlot *slot, HeapTuple tuple, AttrNumber att,
			 bool *isnull)
{
	if (tuple != NULL)
		return heap_getattr(tuple, att, slot->tts_tupleDescriptor, isnull);
	return slot_getattr(slot, att, isnull);
}

/*
 * Adds cost to the group of the key whose values are in probe_values and
 * probe_nulls, making the group on its key's first row.
 */
static void
rl_groups_count(RlGroups *groups, RlTriggerConf *conf, uint32 hash,
				int64 cost)
{
	Datum	   *values = groups->probe_values;
	bool	   *nulls = groups->probe_nulls;
	RlRowKey	probe;
	RlRowEntry *entry;
	int			g;
	bool		found;

	probe.hash = hash;
	probe.first = values[0];
	probe.firstnull = nulls[0];
	probe.group = -1;
	entry = rl_rows_insert(groups->byvalue, probe, &found);
	if (!found)
	{
		MemoryContext old;
		RlGroup    *group;

		if (groups->n == RL_MAX_STATEMENT_KEYS)
			ereport(ERROR,
					(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
					 errmsg("statement on table \"%s\" has more than %d distinct rate limit keys",
							conf->table, RL_MAX_STATEMENT_KEYS),
					 errdetail("Trigger \"%s\" checks at most %d keys in one statement.",
							   conf->trigger, RL_MAX_STATEMENT_KEYS),
					 errhint("Split the statement into smaller ones, or use rl_throttle in a row trigger.")));
		old = MemoryContextSwitchTo(groups->cxt);
		group = palloc(sizeof(RlGroup));
		group->values = palloc(sizeof(Datum) * groups->ncols);
		group->nulls = palloc(sizeof(bool) * groups->ncols);
		for (int i = 0; i < groups->ncols; i++)
		{
			group->nulls[i] = nulls[i];
			group->values[i] = nulls[i] ? (Datum) 0 :
				datumCopy(values[i], groups->byval[i], groups->typlen[i]);
		}
		group->hashkey = NULL;
		group->key = NULL;
		group->cost = 0;
		if (groups->n == groups->allocated)
		{
			groups->allocated *= 2;
			groups->order = repalloc(groups->order,
									 sizeof(RlGroup *) * groups->allocated);
			groups->costs = repalloc(groups->costs,
									 sizeof(int64) * groups->allocated);
		}
		groups->order[groups->n] = group;
		groups->costs[groups->n] = 0;
		MemoryContextSwitchTo(old);
		/* The entry's key is the probe until here: point it at the copy. */
		entry->key.group = groups->n++;
		entry->key.first = group->values[0];
	}
	g = entry->key.group;
	/* Each cost is at most the limit, and we stop past it: no overflow. */
	groups->costs[g] += cost;
	if (groups->costs[g] > rl_capacity(&conf->limiter))
	{
		rl_group_too_big(conf, groups->order[g]);
		groups->costs[g] = rl_capacity(&conf->limiter) + 1;	/* shadow mode */
	}
}

/* A by-value key column's share of a row's hash. */
static inline uint32
rl_byval_hash(Datum value)
{
	return murmurhash32((uint32) (value ^ (value >> 32)));
}

/*
 * Counts the rows held back (single by-value keys only).  Run in a tight
 * loop, the hash probes of many rows overlap their cache misses, where
 * one probe per row, between the INSERT's own work, waits for each.
 */
static void
rl_groups_fold(RlGroups *groups, RlTriggerConf *conf)
{
	int			n = groups->nheld;

	groups->nheld = 0;
	for (int i = 0; i < n; i++)
	{
		groups->probe_values[0] = groups->held_values[i];
		groups->probe_nulls[0] = groups->held_nulls[i];
		rl_groups_count(groups, conf,
						hash_combine(0, groups->held_nulls[i] ? RL_NULL_HASH :
									 rl_byval_hash(groups->held_values[i])),
						groups->held_costs[i]);
	}
}

/*
 * Adds one row's cost to its key's group.  tuple is the row as a heap
 * tuple, or NULL to read it from the slot.  The columns are conf's, not
 * the ones the groups were made with: the partitions of a table share
 * one set of groups, and a partition can number its columns differently.  A single by-value key is only
 * held back here, and counted with the next RL_HELD_ROWS - 1 rows.
 */
void
rl_groups_add(RlGroups *groups, RlTriggerConf *conf, TupleTableSlot *slot,
			  HeapTuple tuple)
{
	Datum	   *values = groups->probe_values;
	bool	   *nulls = groups->probe_nulls;
	int64		cost = 1;
	uint32		hash = 0;

	if (conf->costcol != 0)
	{
		bool		isnull;
		Datum		value = rl_row_value(slot, tuple, conf->costcol, &isnull);

		cost = rl_trigger_cost_value(conf, value, isnull);
	}

	if (groups->one_byval)
	{
		int			i = groups->nheld;

		groups->held_values[i] = rl_row_value(slot, tuple, conf->cols[0],
											  &groups->held_nulls[i]);
		groups->held_costs[i] = cost;
		if (++groups->nheld == RL_HELD_ROWS)
			rl_groups_fold(groups, conf);
		return;
	}

	if (groups->rowcxt_used)
	{
		MemoryContextReset(groups->rowcxt);
		groups->rowcxt_used = false;
	}
	for (int i = 0; i < groups->ncols; i++)
	{
		Datum		value = rl_row_value(slot, tuple, conf->cols[i], &nulls[i]);
		const void *bytes;
		Size		len;

		if (nulls[i])
		{
			values[i] = (Datum) 0;
			hash = hash_combine(hash, RL_NULL_HASH);
			continue;
		}
		if (groups->byval[i])
			hash = hash_combine(hash, rl_byval_hash(value));
		else
		{
			if (groups->typlen[i] == -1 &&
				(VARATT_IS_EXTERNAL(DatumGetPointer(value)) ||
				 VARATT_IS_COMPRESSED(DatumGetPointer(value))))
			{
				MemoryContext old = MemoryContextSwitchTo(groups->rowcxt);

				value = PointerGetDatum(PG_DETOAST_DATUM_PACKED(value));
				MemoryContextSwitchTo(old);
				groups->rowcxt_used = true;
			}
			bytes = rl_value_bytes(groups, &value, i, &len);
			hash = hash_combine(hash, hash_bytes(bytes, (int) len));
		}
		values[i] = value;
	}
	rl_groups_count(groups, conf, hash, cost);
}

/*
 * The groups, one per limiter key text, in the order keys first
 * appeared; each group's key is set.
 */
RlGroup **
rl_groups_finish(RlGroups *groups, RlTriggerConf *conf, int *ngroups)
{
	HTAB	   *bykey;
	HASHCTL		ctl;
	RlGroup   **merged;
	StringInfoData key;
	int			m = 0;
	MemoryContext old;

	rl_groups_fold(groups, conf);
	old = MemoryContextSwitchTo(groups->cxt);
	ctl.keysize = sizeof(char *);
	ctl.entrysize = sizeof(RlGroup);
	ctl.hash = rl_group_hash;
	ctl.match = rl_group_match;
	ctl.hcxt = groups->cxt;
	bykey = hash_create("ratelimit statement keys", Max(groups->n, 16), &ctl,
						HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	merged = palloc(sizeof(RlGroup *) * Max(groups->n, 1));
	initStringInfo(&key);
	for (int i = 0; i < groups->n; i++)
	{
		RlGroup    *from = groups->order[i];
		RlGroup    *group;
		bool		found;

		from->cost = groups->costs[i];
		rl_trigger_key_values(conf, from->values, from->nulls, &key, NULL);
		group = hash_search(bykey, &key.data, HASH_ENTER, &found);
		if (!found)
		{
			/* The entry's key pointed at the buffer: point it at a copy. */
			group->key = pstrdup(key.data);
			group->hashkey = group->key;
			group->values = from->values;
			group->nulls = from->nulls;
			group->cost = 0;
			merged[m++] = group;
		}
		group->cost += from->cost;
		if (group->cost > rl_capacity(&conf->limiter))
			rl_group_too_big(conf, group);
	}
	MemoryContextSwitchTo(old);
	*ngroups = m;
	return merged;
}
