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
#include "miscadmin.h"
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

/* The rows of one key. */
typedef struct RlGroup
{
	char	   *key;			/* hash key: the limiter key */
	char	   *desc;			/* (col, ...)=(value, ...) for messages */
	int64		cost;
} RlGroup;

/* Groups are found by their limiter key, a string of any length. */
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
 * A key whose rows alone exceed the limit: no wait can help it, so the
 * statement fails before Redis is asked.  Inside PostgREST the 429 says
 * to wait a window, the least that could help a smaller retry.
 */
static void
rl_group_too_big(RlTriggerConf *conf, RlGroup *group)
{
	RlAnswer	answer = {0};
	char	   *detail;

	if (conf->costcol == 0)
		detail = psprintf("The statement writes more than " INT64_FORMAT " rows for key %s, which no window can admit.",
						  conf->limiter.limit, group->desc);
	else
		detail = psprintf("The statement's rows for key %s cost more than " INT64_FORMAT " in total (column \"%s\"), which no window can admit.",
						  group->desc, conf->limiter.limit, conf->costname);
	answer.known = false;
	answer.retry_after_ms = (conf->limiter.window_us + 999) / 1000;
	rl_trigger_raise(conf, detail,
					 psprintf("Trigger \"%s\" limits the rows written per key; split the statement into smaller ones.",
							  conf->trigger),
					 &answer);
}

/*
 * Reads the transition table and sums each key's cost, in the order keys
 * first appear.  Stops with an error as soon as a key's rows exceed the
 * limit, or there are too many keys: nothing has been sent to Redis yet.
 */
static RlGroup **
rl_group_rows(RlTriggerConf *conf, TriggerData *trigdata, int *ngroups)
{
	Tuplestorestate *rows = trigdata->tg_newtable;
	TupleTableSlot *slot;
	HTAB	   *groups;
	HASHCTL		ctl;
	RlGroup   **order;
	int			n = 0;
	int			allocated = 64;
	MemoryContext rowcxt;
	MemoryContext old;
	StringInfoData key;
	StringInfoData desc;
	int			readptr;

	ctl.keysize = sizeof(char *);
	ctl.entrysize = sizeof(RlGroup);
	ctl.hash = rl_group_hash;
	ctl.match = rl_group_match;
	ctl.hcxt = CurrentMemoryContext;
	groups = hash_create("ratelimit statement keys", 256, &ctl,
						 HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	order = palloc(sizeof(RlGroup *) * allocated);
	initStringInfo(&key);
	initStringInfo(&desc);
	rowcxt = AllocSetContextCreate(CurrentMemoryContext, "ratelimit row",
								   ALLOCSET_DEFAULT_SIZES);

	/* Our own read pointer: other triggers may read the same rows. */
	slot = MakeSingleTupleTableSlot(RelationGetDescr(trigdata->tg_relation),
									&TTSOpsMinimalTuple);
	readptr = tuplestore_alloc_read_pointer(rows, EXEC_FLAG_REWIND);
	tuplestore_select_read_pointer(rows, readptr);
	tuplestore_rescan(rows);

	while (tuplestore_gettupleslot(rows, true, false, slot))
	{
		RlGroup    *group;
		char	   *lookup;
		bool		found;
		int64		cost;

		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(rowcxt);
		old = MemoryContextSwitchTo(rowcxt);
		rl_trigger_key(conf, slot, &key, &desc);
		cost = rl_trigger_cost(conf, slot);
		MemoryContextSwitchTo(old);

		lookup = key.data;
		group = hash_search(groups, &lookup, HASH_ENTER, &found);
		if (!found)
		{
			if (n == RL_MAX_STATEMENT_KEYS)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("statement on table \"%s\" has more than %d distinct rate limit keys",
								conf->table, RL_MAX_STATEMENT_KEYS),
						 errdetail("Trigger \"%s\" checks all keys of a statement in one Redis script.",
								   conf->trigger),
						 errhint("Split the statement into smaller ones, or use rl_throttle in a row trigger.")));
			group->key = pstrdup(key.data);
			group->desc = pstrdup(desc.data);
			group->cost = 0;
			if (n == allocated)
			{
				allocated *= 2;
				order = repalloc(order, sizeof(RlGroup *) * allocated);
			}
			order[n++] = group;
		}
		/* Each cost is at most the limit, so this cannot overflow. */
		group->cost += cost;
		if (group->cost > conf->limiter.limit)
			rl_group_too_big(conf, group);
	}

	tuplestore_select_read_pointer(rows, 0);
	ExecDropSingleTupleTableSlot(slot);
	MemoryContextDelete(rowcxt);
	*ngroups = n;
	return order;
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
						  tightest >= 0 ? groups[which[tightest]]->desc : NULL,
						  &answer);
	return PointerGetDatum(NULL);
}
