/*-------------------------------------------------------------------------
 *
 * rl_trigger_statement.c
 *	  rl_throttle_statement: rate-limits a whole statement's rows at once.
 *
 * A row trigger costs a round trip per row; a bulk INSERT ... SELECT or
 * COPY of a million rows would spend minutes talking to Redis.  This
 * trigger groups a statement's rows by key (cost = rows, or the sum of
 * the cost column) and checks up to 64 keys per script run: all or
 * nothing.  If any key would go over its limit nothing is consumed
 * anywhere and the statement fails with the row trigger's error;
 * otherwise every key's cost is consumed.  More keys are checked 64 at
 * a time, so that no script blocks Redis for long; a refusal then leaves
 * the chunks checked before it consumed (see rl_check_groups).  A script
 * touches all of its keys, so against a Redis Cluster the keys are
 * checked one script per hash slot, in a check round and then a consume
 * round (rl_trigger_slots.c).
 *
 * It comes in two forms, with the same arguments as rl_throttle
 * (rl_trigger.c), except that a statement cannot skip rows:
 *
 * - One trigger that reads the rows back from a transition table:
 *
 *		CREATE TRIGGER comments_bulk AFTER INSERT ON comments
 *			REFERENCING NEW TABLE AS rl_new
 *			FOR EACH STATEMENT EXECUTE FUNCTION
 *			rl_throttle_statement('author_id', 'sliding_log', '10', '1 minute');
 *
 *	 It counts exactly the rows written.  It refuses partitioned tables,
 *	 partitions and inheritance, whose other statements it cannot see.
 *
 * - Two triggers with the same arguments: a BEFORE ... FOR EACH ROW one
 *	 that only counts each row, in memory, and an AFTER ... FOR EACH
 *	 STATEMENT one without a transition table that checks the counts.
 *	 PostgreSQL then keeps no copy of the rows, which makes this form
 *	 cheaper; but it counts the rows the statement tries to write, which
 *	 includes rows a later BEFORE trigger or ON CONFLICT DO NOTHING drops.
 *
 * Counts wait between the two triggers in a list of pending counts, one
 * per table, arguments and subtransaction level.  A statement and its
 * nested statements at the same level share one; when the first of them
 * ends it checks what has been counted so far, and the rest is checked
 * by the next.  Every counted row is checked exactly once.  A rolled
 * back subtransaction drops its counts, and the list lives in the
 * transaction's memory.
 *
 * Some rows fire the row half and never the statement half: on a
 * partitioned table PostgreSQL puts the row half on every partition, but
 * a statement on a partition (INSERT, COPY) fires the partition's
 * statement triggers only, not the parent's; a pair on a partition
 * or an inheritance child counts the rows a statement on the parent
 * writes there.  So when a query or utility statement ends (the
 * executor's and ProcessUtility's hooks; the library is always
 * preloaded) whatever it counted and nothing checked is checked then,
 * and anything still left at commit is checked before the commit.
 * The counts of a partition's rows go under the table the trigger was
 * created on, whose key they use and whose statement half checks them.
 *
 * The transition-table form cannot see rows that bypass its table's
 * statements, so it refuses a partitioned table, a partition and both
 * ends of an inheritance (rl_trigger_check_table), when it is created
 * and when it fires.  The ProcessUtility hook checks every new trigger
 * of ours as its first firing would (rl_check_created_trigger).
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/trigger/rl_trigger_statement.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "catalog/pg_language.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "postmaster/walwriter.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

#include "rl_engine.h"
#include "rl_stats.h"
#include "rl_trigger.h"

PG_FUNCTION_INFO_V1(rl_throttle_statement);

/* Counts made by a row trigger, waiting for its statement trigger. */
typedef struct RlPending
{
	struct RlPending *next;
	Oid			relid;			/* the table the triggers were created on */
	char	   *args;			/* the triggers' arguments, joined */
	int			level;			/* subtransaction nesting level */
	int			depth;			/* rl_depth when its first row was counted */
	RlTriggerConf *conf;		/* a copy, to check them with */
	RlGroups   *groups;
} RlPending;

/* What a trigger keeps for the length of its statement. */
typedef struct RlStatementState
{
	char	   *args;			/* its arguments, joined */
	bool		partnered;		/* its other half was found */
	RlPending  *pending;		/* where its rows were counted last */
	uint64		generation;		/* rl_generation when pending was found */
} RlStatementState;

/* The pending counts, in a context under the transaction's. */
static MemoryContext rl_pending_cxt = NULL;
static RlPending *rl_pending = NULL;

/* Bumped whenever a pending entry goes, so cached pointers are checked. */
static uint64 rl_generation = 0;

static bool rl_subxact_registered = false;

/* Queries and utility statements running (hooks below). */
static int	rl_depth = 0;

static ExecutorRun_hook_type rl_prev_executor_run = NULL;
static ExecutorFinish_hook_type rl_prev_executor_finish = NULL;
static ProcessUtility_hook_type rl_prev_process_utility = NULL;

static void rl_check_groups(RlTriggerConf *conf, RlGroups *groups);

/* The transaction's memory is going: so are its pending counts. */
static void
rl_pending_forget(void *arg)
{
	rl_pending_cxt = NULL;
	rl_pending = NULL;
	rl_generation++;
}

/* Unlinks an entry; its memory is the caller's to free or keep. */
static void
rl_pending_unlink(RlPending *entry)
{
	RlPending **link = &rl_pending;

	while (*link != entry)
		link = &(*link)->next;
	*link = entry->next;
	rl_generation++;
}

/*
 * A rolled back subtransaction rolls back its rows, and with them their
 * counts; the counts of the levels around it stay.
 */
static void
rl_pending_subxact(SubXactEvent event, SubTransactionId mySubid,
				   SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	RlPending  *entry = rl_pending;

	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	while (entry != NULL)
	{
		RlPending  *next = entry->next;

		if (entry->level >= level)
		{
			rl_pending_unlink(entry);
			MemoryContextDelete(rl_groups_context(entry->groups));
		}
		entry = next;
	}
}

/* The pending counts of a table and arguments at this level, if any. */
static RlPending *
rl_pending_find(Oid relid, const char *args)
{
	int			level = GetCurrentTransactionNestLevel();

	for (RlPending *entry = rl_pending; entry != NULL; entry = entry->next)
	{
		if (entry->relid == relid && entry->level == level &&
			strcmp(entry->args, args) == 0)
			return entry;
	}
	return NULL;
}

/*
 * Checks the counts that queries at depths above depth, at this level or
 * deeper, left unchecked (all of them, with depth -1).  Each entry leaves
 * the list before its check, so it is checked once whatever happens.
 */
static void
rl_pending_check_left(int depth)
{
	int			level = GetCurrentTransactionNestLevel();

	while (rl_pending != NULL)
	{
		RlPending  *entry = rl_pending;
		MemoryContext cxt;

		while (entry != NULL && (entry->depth <= depth || entry->level < level))
			entry = entry->next;
		if (entry == NULL)
			return;
		rl_pending_unlink(entry);
		cxt = rl_groups_context(entry->groups);
		MemoryContextSetParent(cxt, CurrentMemoryContext);
		rl_check_groups(entry->conf, entry->groups);
		MemoryContextDelete(cxt);
	}
}

/* Counts left at commit are checked before it. */
static void
rl_pending_xact(XactEvent event, void *arg)
{
	if ((event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PRE_PREPARE) &&
		rl_pending != NULL)
		rl_pending_check_left(-1);
}

/* A new, empty entry for the table and arguments at this level. */
static RlPending *
rl_pending_create(RlTriggerConf *conf, Relation rel, const char *args)
{
	RlPending  *entry;
	RlGroups   *groups;

	/* Without the hooks, counts no statement half takes would be lost. */
	rl_require_preload();
	if (!rl_subxact_registered)
	{
		RegisterSubXactCallback(rl_pending_subxact, NULL);
		RegisterXactCallback(rl_pending_xact, NULL);
		rl_subxact_registered = true;
	}
	if (rl_pending_cxt == NULL)
	{
		MemoryContextCallback *callback;

		rl_pending_cxt = AllocSetContextCreate(TopTransactionContext,
											   "ratelimit pending counts",
											   ALLOCSET_SMALL_SIZES);
		callback = MemoryContextAlloc(rl_pending_cxt,
									  sizeof(MemoryContextCallback));
		callback->func = rl_pending_forget;
		callback->arg = NULL;
		MemoryContextRegisterResetCallback(rl_pending_cxt, callback);
	}
	groups = rl_groups_create(conf, RelationGetDescr(rel), rl_pending_cxt);
	entry = MemoryContextAlloc(rl_groups_context(groups), sizeof(RlPending));
	entry->relid = conf->relid;
	entry->args = MemoryContextStrdup(rl_groups_context(groups), args);
	entry->level = GetCurrentTransactionNestLevel();
	entry->depth = rl_depth;
	entry->conf = rl_trigger_conf_copy(conf, rl_groups_context(groups));
	entry->groups = groups;
	entry->next = rl_pending;
	rl_pending = entry;
	return entry;
}

/* The trigger's arguments as one string, to pair the two triggers. */
static char *
rl_join_args(Trigger *trigger)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < trigger->tgnargs; i++)
		appendStringInfo(&buf, "%zu:%s;", strlen(trigger->tgargs[i]),
						 trigger->tgargs[i]);
	return buf.data;
}

/*
 * Whether the table has the other half of this two-trigger pair: the
 * same function and arguments, enabled alike, for the event that fired.
 * The statement half must have no WHEN condition and no transition
 * table, and the same UPDATE OF columns, so that it runs whenever the
 * row half has counted rows.
 */
static bool
rl_find_partner(TriggerData *trigdata, const char *args)
{
	Trigger    *self = trigdata->tg_trigger;
	TriggerDesc *desc = trigdata->tg_relation->trigdesc;
	bool		row = TRIGGER_FIRED_FOR_ROW(trigdata->tg_event);
	int16		event = TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) ?
		TRIGGER_TYPE_INSERT : TRIGGER_TYPE_UPDATE;

	for (int i = 0; i < desc->numtriggers; i++)
	{
		Trigger    *other = &desc->triggers[i];
		Trigger    *stmt = row ? other : self;
		char	   *other_args;

		if (other->tgoid == self->tgoid || other->tgfoid != self->tgfoid ||
			other->tgenabled != self->tgenabled)
			continue;
		if (row ?
			!TRIGGER_TYPE_MATCHES(other->tgtype, TRIGGER_TYPE_STATEMENT,
								  TRIGGER_TYPE_AFTER, event) :
			!TRIGGER_TYPE_MATCHES(other->tgtype, TRIGGER_TYPE_ROW,
								  TRIGGER_TYPE_BEFORE, event))
			continue;
		if (stmt->tgqual != NULL || stmt->tgnewtable != NULL ||
			other->tgnattr != self->tgnattr ||
			(self->tgnattr > 0 &&
			 memcmp(other->tgattr, self->tgattr,
					sizeof(int16) * self->tgnattr) != 0))
			continue;
		other_args = rl_join_args(other);
		if (strcmp(other_args, args) == 0)
			return true;
	}
	return false;
}

/* The state kept in the trigger's configuration, made on first use. */
static RlStatementState *
rl_statement_state(FunctionCallInfo fcinfo, RlTriggerConf *conf,
				   TriggerData *trigdata)
{
	RlStatementState *state = (RlStatementState *) conf->statement;
	MemoryContext old;

	if (state != NULL)
		return state;
	old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	state = palloc0(sizeof(RlStatementState));
	state->args = rl_join_args(trigdata->tg_trigger);
	MemoryContextSwitchTo(old);
	state->partnered = rl_find_partner(trigdata, state->args);
	conf->statement = state;
	return state;
}

/*
 * The row half of the two-trigger form: counts the row under its key
 * and lets it through.  Nothing is asked of Redis until the statement
 * ends, but a key whose rows alone exceed the limit fails at once.
 */
static Datum
rl_count_row(FunctionCallInfo fcinfo, TriggerData *trigdata,
			 RlTriggerConf *conf)
{
	RlStatementState *state = rl_statement_state(fcinfo, conf, trigdata);
	Relation	rel = trigdata->tg_relation;
	bool		update = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event);

	/*
	 * A partition's copy of the row half has its partner on the table it
	 * was created on; the rows it counts are checked when the statement
	 * ends in any case.
	 */
	if (!state->partnered && !trigdata->tg_trigger->tgisclone)
	{
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("trigger \"%s\" on table \"%s\" has no statement trigger to check its rows",
						conf->trigger, RelationGetRelationName(rel)),
				 errdetail("A FOR EACH ROW rl_throttle_statement trigger only counts rows; an AFTER %s ... FOR EACH STATEMENT trigger with the same arguments, without a WHEN condition or transition table, checks them.",
						   update ? "UPDATE" : "INSERT"),
				 errhint("Create the statement trigger, or use rl_throttle to check each row on its own.")));
	}

	if (state->pending == NULL || state->generation != rl_generation ||
		state->pending->level != GetCurrentTransactionNestLevel())
	{
		state->pending = rl_pending_find(conf->relid, state->args);
		if (state->pending == NULL)
			state->pending = rl_pending_create(conf, rel, state->args);
		state->generation = rl_generation;
	}
	rl_groups_add(state->pending->groups, conf,
				  update ? trigdata->tg_newslot : trigdata->tg_trigslot,
				  update ? trigdata->tg_newtuple : trigdata->tg_trigtuple);
	return PointerGetDatum(update ? trigdata->tg_newtuple :
						   trigdata->tg_trigtuple);
}

/* Reads the transition table's rows into groups. */
static RlGroups *
rl_read_transition(RlTriggerConf *conf, TriggerData *trigdata)
{
	Tuplestorestate *rows = trigdata->tg_newtable;
	TupleDesc	tupdesc = RelationGetDescr(trigdata->tg_relation);
	RlGroups   *groups = rl_groups_create(conf, tupdesc, CurrentMemoryContext);
	TupleTableSlot *slot;
	int			readptr;

	/* Our own read pointer: other triggers may read the same rows. */
	slot = MakeSingleTupleTableSlot(tupdesc, &TTSOpsMinimalTuple);
	readptr = tuplestore_alloc_read_pointer(rows, EXEC_FLAG_REWIND);
	tuplestore_select_read_pointer(rows, readptr);
	tuplestore_rescan(rows);
	while (tuplestore_gettupleslot(rows, true, false, slot))
	{
		CHECK_FOR_INTERRUPTS();
		rl_groups_add(groups, conf, slot, NULL);
	}
	tuplestore_select_read_pointer(rows, 0);
	ExecDropSingleTupleTableSlot(slot);
	return groups;
}

/*
 * Work the commit would do anyway, done while Redis runs the statement's
 * check: the store runs it once the scripts are written, before it waits
 * (rl_engine_check_statement's wait_work).  A statement that wrote much WAL (a bulk
 * INSERT) leaves it to be written and flushed at commit; flushing it now
 * overlaps that I/O with Redis's script instead of following it.  The
 * threshold is the WAL writer's own (wal_writer_flush_after), so a
 * transaction of small statements flushes no more often than the WAL
 * writer would; with synchronous_commit off nothing is flushed early.
 */
static void
rl_flush_wal_while_waiting(void)
{
	XLogRecPtr	upto = XactLastRecEnd;
	XLogRecPtr	flushed;

	if (upto == InvalidXLogRecPtr || synchronous_commit <= SYNCHRONOUS_COMMIT_OFF)
		return;
	flushed = GetFlushRecPtr(NULL);
	if (upto <= flushed ||
		upto - flushed < (uint64) Max(WalWriterFlushAfter, 1) * XLOG_BLCKSZ)
		return;
	XLogFlush(upto);
}

/*
 * The statement's end, in either form: checks and consumes the keys'
 * costs through the engine (rl_engine_check_statement), in the order the
 * keys first appeared, RL_STATEMENT_CHUNK keys per check; the first
 * refusal fails the statement.  Keys whose rows cost nothing are not
 * sent; a key no window can admit (rl_group_too_big, reached only in
 * shadow mode) is counted as refused without asking the store.
 */
static void
rl_check_groups(RlTriggerConf *conf, RlGroups *groups)
{
	RlGroup   **list;
	int			ngroups;
	int			n = 0;
	char	  **keys;
	int64	   *costs;
	int		   *which;
	RlAnswer	answer;
	int			refused;

	list = rl_groups_finish(groups, conf, &ngroups);
	keys = palloc(sizeof(char *) * Max(ngroups, 1));
	costs = palloc(sizeof(int64) * Max(ngroups, 1));
	which = palloc(sizeof(int) * Max(ngroups, 1));
	for (int i = 0; i < ngroups; i++)
	{
		if (list[i]->cost == 0)
			continue;
		if (list[i]->cost > rl_capacity(&conf->limiter))
		{
			rl_engine_count_refusal(rl_trigger_redis_key(conf, list[i]->key),
									&conf->limiter);
			continue;
		}
		keys[n] = rl_trigger_redis_key(conf, list[i]->key);
		costs[n] = list[i]->cost;
		which[n] = i;
		n++;
	}

	/* The statement's WAL is flushed while the store checks its keys. */
	refused = rl_engine_check_statement(keys, &conf->limiter, costs, n,
										rl_flush_wal_while_waiting, &answer);
	if (!answer.allowed)
		rl_trigger_denied(conf,
						  refused >= 0 ? rl_group_desc(conf, list[which[refused]]) : NULL,
						  &answer);
}

/*
 * rl_throttle_statement(): AFTER INSERT OR UPDATE ... REFERENCING NEW
 * TABLE AS ... FOR EACH STATEMENT; or a BEFORE INSERT OR UPDATE ... FOR
 * EACH ROW trigger and an AFTER INSERT OR UPDATE ... FOR EACH STATEMENT
 * trigger with the same arguments.
 */
Datum
rl_throttle_statement(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	RlTriggerConf *conf;
	RlStatementState *state;
	RlPending  *pending;
	MemoryContext cxt;
	bool		row;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_throttle_statement: not called by the trigger manager")));
	row = TRIGGER_FIRED_FOR_ROW(trigdata->tg_event);
	if (!(TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) ||
		  TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event)) ||
		(row && !TRIGGER_FIRED_BEFORE(trigdata->tg_event)) ||
		(!row && !TRIGGER_FIRED_AFTER(trigdata->tg_event)))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_throttle_statement must be fired AFTER INSERT or UPDATE FOR EACH STATEMENT, or BEFORE INSERT or UPDATE FOR EACH ROW"),
				 errhint("For row-level throttling use rl_throttle in a BEFORE ... FOR EACH ROW trigger.")));

	conf = rl_trigger_conf(fcinfo, trigdata);
	if (conf->skip)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid argument 5 of trigger \"%s\" on table \"%s\": a statement trigger cannot skip rows",
						conf->trigger, RelationGetRelationName(trigdata->tg_relation)),
				 errhint("Use \"raise\", or rl_throttle in a BEFORE ... FOR EACH ROW trigger to skip rows.")));

	if (row)
		return rl_count_row(fcinfo, trigdata, conf);

	if (trigdata->tg_newtable != NULL)
	{
		rl_check_groups(conf, rl_read_transition(conf, trigdata));
		return PointerGetDatum(NULL);
	}

	state = rl_statement_state(fcinfo, conf, trigdata);
	if (!state->partnered)
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("trigger \"%s\" has no transition table of new rows",
						trigdata->tg_trigger->tgname),
				 errhint("Create it with REFERENCING NEW TABLE AS rl_new, or pair it with a BEFORE %s ... FOR EACH ROW trigger with the same arguments.",
						 TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ? "UPDATE" : "INSERT")));

	/*
	 * Take the counts out of the list first: whatever happens below, they
	 * are checked once, and go with this call's memory.
	 */
	pending = rl_pending_find(conf->relid, state->args);
	if (pending == NULL)
		return PointerGetDatum(NULL);
	rl_pending_unlink(pending);
	cxt = rl_groups_context(pending->groups);
	MemoryContextSetParent(cxt, CurrentMemoryContext);
	rl_check_groups(conf, pending->groups);
	return PointerGetDatum(NULL);
}

/*
 * The hooks below keep rl_depth, the number of queries and utility
 * statements running, so that each can check the rows counted while it
 * ran (at a greater depth) and no one else's: a nested query must not
 * check its outer statement's counts, or a PL/pgSQL block that catches
 * the denial would drop them unchecked.
 */
static void
rl_executor_run(RL_EXECUTOR_RUN_PARAMS)
{
	rl_depth++;
	PG_TRY();
	{
		if (rl_prev_executor_run)
			rl_prev_executor_run(RL_EXECUTOR_RUN_ARGS);
		else
			standard_ExecutorRun(RL_EXECUTOR_RUN_ARGS);
	}
	PG_FINALLY();
	{
		rl_depth--;
	}
	PG_END_TRY();
}

/*
 * After the query's AFTER triggers (its statement halves among them)
 * fired: checks what it counted and they did not.
 */
static void
rl_executor_finish(QueryDesc *queryDesc)
{
	rl_depth++;
	PG_TRY();
	{
		if (rl_prev_executor_finish)
			rl_prev_executor_finish(queryDesc);
		else
			standard_ExecutorFinish(queryDesc);
	}
	PG_FINALLY();
	{
		rl_depth--;
	}
	PG_END_TRY();
	if (rl_pending != NULL)
		rl_pending_check_left(rl_depth);
}

/*
 * Whether a trigger's function is one of ours, by its C symbol (the
 * extension's schema is the user's choice).
 */
static bool
rl_is_own_function(Oid funcoid, const char *symbol)
{
	HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcoid));
	bool		ours = false;

	if (!HeapTupleIsValid(tuple))
		return false;
	if (((Form_pg_proc) GETSTRUCT(tuple))->prolang == ClanguageId)
	{
		bool		isnull;
		Datum		src = SysCacheGetAttr(PROCOID, tuple, Anum_pg_proc_prosrc,
										  &isnull);

		ours = !isnull && strcmp(TextDatumGetCString(src), symbol) == 0;
	}
	ReleaseSysCache(tuple);
	return ours;
}

/*
 * CREATE TRIGGER, once done: an rl_throttle or rl_throttle_statement
 * trigger for INSERT or UPDATE has its arguments, key column types and
 * table checked as its first firing would check them (rl_trigger_conf),
 * so a mistake shows at once and the trigger is not created.  The way it
 * fires (BEFORE, AFTER, the level) is checked when it fires.
 */
static void
rl_check_created_trigger(CreateTrigStmt *stmt)
{
	Oid			relid = RangeVarGetRelid(stmt->relation, NoLock, true);
	Relation	rel;
	TriggerDesc *desc;

	if (!OidIsValid(relid))
		return;
	rel = table_open(relid, NoLock);
	desc = rel->trigdesc;
	for (int i = 0; desc != NULL && i < desc->numtriggers; i++)
	{
		Trigger    *trigger = &desc->triggers[i];
		int16		type = trigger->tgtype;
		TriggerData trigdata = {0};
		FmgrInfo	flinfo = {0};

		LOCAL_FCINFO(fcinfo, 0);

		if (strcmp(trigger->tgname, stmt->trigname) != 0 ||
			TRIGGER_FOR_INSTEAD(type) ||
			!(TRIGGER_FOR_INSERT(type) || TRIGGER_FOR_UPDATE(type)) ||
			!(rl_is_own_function(trigger->tgfoid, "rl_throttle") ||
			  rl_is_own_function(trigger->tgfoid, "rl_throttle_statement")))
			continue;
		trigdata.type = T_TriggerData;
		trigdata.tg_event =
			(TRIGGER_FOR_BEFORE(type) ? TRIGGER_EVENT_BEFORE : TRIGGER_EVENT_AFTER) |
			(TRIGGER_FOR_ROW(type) ? TRIGGER_EVENT_ROW : 0) |
			(TRIGGER_FOR_INSERT(type) ? TRIGGER_EVENT_INSERT : TRIGGER_EVENT_UPDATE);
		trigdata.tg_relation = rel;
		trigdata.tg_trigger = trigger;
		flinfo.fn_mcxt = CurrentMemoryContext;
		fcinfo->flinfo = &flinfo;
		(void) rl_trigger_conf(fcinfo, &trigdata);
	}
	table_close(rel, NoLock);
}

/*
 * Utility statements: COPY counts rows outside any query, and CREATE
 * TRIGGER is checked here.
 */
static void
rl_process_utility(PlannedStmt *pstmt, const char *queryString,
				   bool readOnlyTree, ProcessUtilityContext context,
				   ParamListInfo params, QueryEnvironment *queryEnv,
				   DestReceiver *dest, QueryCompletion *qc)
{
	rl_depth++;
	PG_TRY();
	{
		if (rl_prev_process_utility)
			rl_prev_process_utility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
		else
			standard_ProcessUtility(pstmt, queryString, readOnlyTree, context,
									params, queryEnv, dest, qc);
	}
	PG_FINALLY();
	{
		rl_depth--;
	}
	PG_END_TRY();
	if (!IsTransactionState())
		return;
	if (IsA(pstmt->utilityStmt, CreateTrigStmt))
		rl_check_created_trigger((CreateTrigStmt *) pstmt->utilityStmt);
	if (rl_pending != NULL)
		rl_pending_check_left(rl_depth);
}

/* Installs the hooks; called from _PG_init when preloaded. */
void
rl_trigger_hooks_init(void)
{
	rl_prev_executor_run = ExecutorRun_hook;
	ExecutorRun_hook = rl_executor_run;
	rl_prev_executor_finish = ExecutorFinish_hook;
	ExecutorFinish_hook = rl_executor_finish;
	rl_prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = rl_process_utility;
}
