/*-------------------------------------------------------------------------
 *
 * rl_trigger_statement.c
 *	  rl_throttle_statement: rate-limits a whole statement's rows at once.
 *
 *		CREATE TRIGGER comments_bulk_throttle AFTER INSERT ON comments
 *			REFERENCING NEW TABLE AS rl_new
 *			FOR EACH STATEMENT EXECUTE FUNCTION
 *			rl_throttle_statement('author_id', 'sliding_log', '10', '1 minute');
 *
 * A row trigger costs a round trip per row; a bulk INSERT ... SELECT or
 * COPY of a million rows would spend minutes talking to Redis.  This
 * trigger reads the statement's new rows from the transition table,
 * groups them by key (cost = rows, or the sum of the cost column), and
 * checks every key in one script run: all or nothing.  If any key would
 * go over its limit nothing is consumed anywhere and the statement
 * fails with the row trigger's error; otherwise every key's cost is
 * consumed.  The one script touches every key, so they must all live on
 * one Redis node (no Redis Cluster).
 *
 * The arguments are those of rl_throttle (rl_trigger.c), except that a
 * statement cannot skip rows: on_deny must be 'raise'.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_trigger_statement.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/tuplestore.h"

#include "rl_trigger.h"

/*
 * Distinct keys per statement.  They all go into one Lua script, which
 * blocks Redis while it runs; ten thousand keys take a few milliseconds.
 */
#define RL_MAX_STATEMENT_KEYS	10000

PG_FUNCTION_INFO_V1(rl_throttle_statement);

/*
 * A row's key column values, compared as stored (detoasted), so grouping
 * a row costs a hash of its key columns and no text.
 */
typedef struct RlRowKey
{
	uint32		hash;
	Datum	   *values;
	bool	   *nulls;
} RlRowKey;

/* The rows of one key. */
typedef struct RlGroup
{
	RlRowKey   *rowkey;			/* hash key of the first level */
	char	   *key;			/* the limiter key */
	int64		cost;
} RlGroup;

/* Key columns' storage, for the hash and match functions below. */
static int	rl_key_ncols;
static int16 *rl_key_typlen;
static bool *rl_key_byval;

/* The bytes a value is compared by: the datum, or what it points to. */
static const void *
rl_value_bytes(const Datum *value, int col, Size *len)
{
	if (rl_key_byval[col])
	{
		*len = sizeof(Datum);
		return value;
	}
	if (rl_key_typlen[col] == -1)
	{
		struct varlena *v = (struct varlena *) DatumGetPointer(*value);

		*len = VARSIZE_ANY_EXHDR(v);
		return VARDATA_ANY(v);
	}
	if (rl_key_typlen[col] == -2)
	{
		*len = strlen(DatumGetCString(*value));
		return DatumGetPointer(*value);
	}
	*len = rl_key_typlen[col];
	return DatumGetPointer(*value);
}

static uint32
rl_rowkey_hash(const void *key, Size keysize)
{
	return (*(RlRowKey *const *) key)->hash;
}

static int
rl_rowkey_match(const void *key1, const void *key2, Size keysize)
{
	const RlRowKey *a = *(RlRowKey *const *) key1;
	const RlRowKey *b = *(RlRowKey *const *) key2;

	for (int i = 0; i < rl_key_ncols; i++)
	{
		const void *pa;
		const void *pb;
		Size		la;
		Size		lb;

		if (a->nulls[i] != b->nulls[i])
			return 1;
		if (a->nulls[i])
			continue;
		if (rl_key_byval[i])
		{
			if (a->values[i] != b->values[i])
				return 1;
			continue;
		}
		pa = rl_value_bytes(&a->values[i], i, &la);
		pb = rl_value_bytes(&b->values[i], i, &lb);
		if (la != lb || memcmp(pa, pb, la) != 0)
			return 1;
	}
	return 0;
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
static char *
rl_group_desc(RlTriggerConf *conf, RlGroup *group)
{
	StringInfoData key;
	StringInfoData desc;

	initStringInfo(&key);
	initStringInfo(&desc);
	rl_trigger_key_values(conf, group->rowkey->values, group->rowkey->nulls,
						  &key, &desc);
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
	char	   *desc = rl_group_desc(conf, group);
	char	   *detail;

	if (conf->costcol == 0)
		detail = psprintf("The statement writes more than " INT64_FORMAT " rows for key %s, which no window can admit.",
						  conf->limiter.limit, desc);
	else
		detail = psprintf("The statement's rows for key %s cost more than " INT64_FORMAT " in total (column \"%s\"), which no window can admit.",
						  desc, conf->limiter.limit, conf->costname);
	answer.known = false;
	answer.retry_after_ms = (conf->limiter.window_us + 999) / 1000;
	rl_trigger_raise(conf, detail,
					 psprintf("Trigger \"%s\" limits the rows written per key; split the statement into smaller ones.",
							  conf->trigger),
					 &answer);
}

/*
 * Reads the transition table and sums each key's cost, in the order keys
 * first appear.  Rows are grouped by their key column values; the limiter
 * key text is made once per group, and groups whose texts coincide (the
 * same value stored two ways) are merged, so no key reaches Redis twice.
 * Errors come before anything is sent to Redis: too many keys, or a key
 * whose rows alone exceed the limit.
 */
static RlGroup **
rl_group_rows(RlTriggerConf *conf, TriggerData *trigdata, int *ngroups)
{
	Tuplestorestate *rows = trigdata->tg_newtable;
	TupleDesc	tupdesc = RelationGetDescr(trigdata->tg_relation);
	TupleTableSlot *slot;
	HTAB	   *byvalue;
	HTAB	   *bykey;
	HASHCTL		ctl;
	RlGroup   **order;
	RlGroup   **merged;
	int			n = 0;
	int			m = 0;
	int			allocated = 64;
	MemoryContext rowcxt;
	MemoryContext old;
	StringInfoData key;
	RlRowKey	probe;
	int			readptr;

	rl_key_ncols = conf->ncols;
	rl_key_typlen = palloc(sizeof(int16) * conf->ncols);
	rl_key_byval = palloc(sizeof(bool) * conf->ncols);
	for (int i = 0; i < conf->ncols; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tupdesc, conf->cols[i] - 1);

		rl_key_typlen[i] = att->attlen;
		rl_key_byval[i] = att->attbyval;
	}
	probe.values = palloc(sizeof(Datum) * conf->ncols);
	probe.nulls = palloc(sizeof(bool) * conf->ncols);

	ctl.keysize = sizeof(RlRowKey *);
	ctl.entrysize = sizeof(RlGroup);
	ctl.hash = rl_rowkey_hash;
	ctl.match = rl_rowkey_match;
	ctl.hcxt = CurrentMemoryContext;
	byvalue = hash_create("ratelimit statement rows", 256, &ctl,
						  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	order = palloc(sizeof(RlGroup *) * allocated);
	rowcxt = AllocSetContextCreate(CurrentMemoryContext, "ratelimit row",
								   ALLOCSET_DEFAULT_SIZES);

	/* Our own read pointer: other triggers may read the same rows. */
	slot = MakeSingleTupleTableSlot(tupdesc, &TTSOpsMinimalTuple);
	readptr = tuplestore_alloc_read_pointer(rows, EXEC_FLAG_REWIND);
	tuplestore_select_read_pointer(rows, readptr);
	tuplestore_rescan(rows);

	while (tuplestore_gettupleslot(rows, true, false, slot))
	{
		RlRowKey   *probeptr = &probe;
		RlGroup    *group;
		bool		found;

		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(rowcxt);
		old = MemoryContextSwitchTo(rowcxt);
		probe.hash = 0;
		for (int i = 0; i < conf->ncols; i++)
		{
			Datum		value = slot_getattr(slot, conf->cols[i], &probe.nulls[i]);
			const void *bytes;
			Size		len;

			if (!probe.nulls[i] && rl_key_typlen[i] == -1)
				value = PointerGetDatum(PG_DETOAST_DATUM_PACKED(value));
			probe.values[i] = value;
			if (probe.nulls[i])
				probe.hash = hash_combine(probe.hash, 0x9e3779b9);
			else
			{
				bytes = rl_value_bytes(&probe.values[i], i, &len);
				probe.hash = hash_combine(probe.hash,
										  hash_bytes(bytes, (int) len));
			}
		}
		MemoryContextSwitchTo(old);

		group = hash_search(byvalue, &probeptr, HASH_ENTER, &found);
		if (!found)
		{
			RlRowKey   *copy = palloc(sizeof(RlRowKey));

			if (n == RL_MAX_STATEMENT_KEYS)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("statement on table \"%s\" has more than %d distinct rate limit keys",
								conf->table, RL_MAX_STATEMENT_KEYS),
						 errdetail("Trigger \"%s\" checks all keys of a statement in one Redis script.",
								   conf->trigger),
						 errhint("Split the statement into smaller ones, or use rl_throttle in a row trigger.")));
			copy->hash = probe.hash;
			copy->values = palloc(sizeof(Datum) * conf->ncols);
			copy->nulls = palloc(sizeof(bool) * conf->ncols);
			for (int i = 0; i < conf->ncols; i++)
			{
				copy->nulls[i] = probe.nulls[i];
				copy->values[i] = probe.nulls[i] ? (Datum) 0 :
					datumCopy(probe.values[i], rl_key_byval[i], rl_key_typlen[i]);
			}
			group->rowkey = copy;
			group->cost = 0;
			if (n == allocated)
			{
				allocated *= 2;
				order = repalloc(order, sizeof(RlGroup *) * allocated);
			}
			order[n++] = group;
		}
		/* Each cost is at most the limit, and we stop past it: no overflow. */
		group->cost += rl_trigger_cost(conf, slot);
		if (group->cost > conf->limiter.limit)
			rl_group_too_big(conf, group);
	}

	tuplestore_select_read_pointer(rows, 0);
	ExecDropSingleTupleTableSlot(slot);
	MemoryContextDelete(rowcxt);

	/* The second level: one group per limiter key text. */
	ctl.keysize = sizeof(char *);
	ctl.entrysize = sizeof(RlGroup);
	ctl.hash = rl_group_hash;
	ctl.match = rl_group_match;
	bykey = hash_create("ratelimit statement keys", Max(n, 16), &ctl,
						HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	merged = palloc(sizeof(RlGroup *) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		RlGroup    *group;
		char	   *text;
		bool		found;

		initStringInfo(&key);
		rl_trigger_key_values(conf, order[i]->rowkey->values,
							  order[i]->rowkey->nulls, &key, NULL);
		text = key.data;
		group = hash_search(bykey, &text, HASH_ENTER, &found);
		if (!found)
		{
			group->key = key.data;
			group->rowkey = order[i]->rowkey;
			group->cost = 0;
			merged[m++] = group;
		}
		group->cost += order[i]->cost;
		if (group->cost > conf->limiter.limit)
			rl_group_too_big(conf, group);
	}
	*ngroups = m;
	return merged;
}

/*
 * rl_throttle_statement(): AFTER INSERT OR UPDATE ... REFERENCING NEW
 * TABLE AS ... FOR EACH STATEMENT
 *
 * Checks and consumes every key's cost in one script run, all or
 * nothing.  Keys whose rows cost nothing are not sent.
 */
Datum
rl_throttle_statement(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	RlTriggerConf *conf;
	RlGroup   **groups;
	int			ngroups;
	int			n = 0;
	char	  **keys;
	RlLimiter  *limiters;
	int64	   *costs;
	int		   *which;
	RlAnswer	answer;
	int			tightest;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_throttle_statement: not called by the trigger manager")));
	if (!TRIGGER_FIRED_AFTER(trigdata->tg_event) ||
		TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!(TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) ||
		  TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event)))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_throttle_statement must be fired AFTER INSERT or UPDATE FOR EACH STATEMENT"),
				 errhint("For row-level throttling use rl_throttle in a BEFORE ... FOR EACH ROW trigger.")));
	if (trigdata->tg_newtable == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" has no transition table of new rows",
						trigdata->tg_trigger->tgname),
				 errhint("Create it with REFERENCING NEW TABLE AS rl_new.")));

	conf = rl_trigger_conf(fcinfo, trigdata);
	if (conf->skip)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid argument 5 of trigger \"%s\" on table \"%s\": a statement trigger cannot skip rows",
						conf->trigger, RelationGetRelationName(trigdata->tg_relation)),
				 errhint("Use \"raise\", or rl_throttle in a BEFORE ... FOR EACH ROW trigger to skip rows.")));

	groups = rl_group_rows(conf, trigdata, &ngroups);

	keys = palloc(sizeof(char *) * Max(ngroups, 1));
	limiters = palloc(sizeof(RlLimiter) * Max(ngroups, 1));
	costs = palloc(sizeof(int64) * Max(ngroups, 1));
	which = palloc(sizeof(int) * Max(ngroups, 1));
	for (int i = 0; i < ngroups; i++)
	{
		if (groups[i]->cost == 0)
			continue;
		keys[n] = rl_trigger_redis_key(conf, groups[i]->key);
		limiters[n] = conf->limiter;
		costs[n] = groups[i]->cost;
		which[n] = i;
		n++;
	}
	if (n == 0)
		return PointerGetDatum(NULL);

	tightest = rl_check_rules(keys, limiters, costs, n, &answer);
	if (!answer.allowed)
		rl_trigger_denied(conf,
						  tightest >= 0 ? rl_group_desc(conf, groups[which[tightest]]) : NULL,
						  &answer);
	return PointerGetDatum(NULL);
}
