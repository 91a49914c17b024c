/*-------------------------------------------------------------------------
 *
 * rl_trigger.c
 *	  rl_throttle: a row trigger that rate-limits writes per key.
 *
 *		CREATE TRIGGER comments_throttle BEFORE INSERT ON comments
 *			FOR EACH ROW EXECUTE FUNCTION
 *			rl_throttle('author_id', 'sliding_log', '10', '1 minute');
 *
 * Trigger arguments: key columns (a comma-separated list), algorithm,
 * limit, window, then optionally what to do on denial ('raise', the
 * default, or 'skip') and the name of a column holding each row's cost.
 * The statement trigger (rl_trigger_statement.c) takes the same ones.
 *
 * The limiter's key is the table and the key columns' names and values,
 *
 *		public.comments:author_id='42'
 *		public.comments:tenant_id='7',author_id=NULL
 *
 * identifiers quoted as identifiers and values as literals, so distinct
 * rows map to distinct keys and two tables, or two triggers on other
 * columns, never share a limiter by accident (on a partitioned table the
 * table is the one the trigger was created on, not the partition).  Its
 * Redis key names the parameters, as every limiter's does (rl_redis_key),
 * so rl_peek with the same key and parameters shows the trigger's state.
 *
 * Values equal under their column's equality must give one key whatever
 * the session's settings (DateStyle, TimeZone, extra_float_digits, ...),
 * or a SET would give a writer a fresh limiter.  So only key types with
 * such a text are accepted (rl_key_form): integers, boolean, uuid, enums,
 * inet and cidr by their output, which no setting changes; text types
 * under a deterministic collation by their output (char without a length
 * without its trailing blanks); numeric without trailing fraction zeros;
 * date and timestamp as ISO, timestamptz as ISO in UTC.  Domains count
 * as their base type.  Any other type is refused when the trigger is
 * created (rl_trigger_statement.c checks every new trigger of ours) and
 * when it fires.
 *
 * The trigger may be BEFORE or AFTER ... FOR EACH ROW.  A BEFORE trigger
 * charges a row before row-level security and constraints check it, so
 * a row that then fails was charged anyway; an AFTER trigger charges only
 * rows that passed, and can only raise ('skip' needs BEFORE).
 *
 * A table with inheritance children is refused: rows written straight
 * into a child fire none of the parent's triggers.  Partitioned tables
 * are fine, since PostgreSQL puts their row triggers on every partition.
 *
 * A denial raises SQLSTATE PT429, which PostgREST also answers with HTTP
 * 429; inside a PostgREST request it raises PostgREST's full form
 * instead, which carries the Retry-After header (rl_postgrest.c).
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/trigger/rl_trigger.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "miscadmin.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/datetime.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "rl_engine.h"
#include "rl_policies.h"
#include "rl_trigger.h"

PG_FUNCTION_INFO_V1(rl_throttle);

/* The usage line every argument error ends with. */
#define RL_TRIGGER_USAGE \
	"The arguments are: key columns, algorithm, limit, window[, on_deny (raise or skip)[, cost column]][, burst=N][, refund=off]."
#define RL_TRIGGER_POLICY_USAGE \
	"With a policy, the arguments are: key columns, policy=NAME[, on_deny (raise or skip)[, cost column]][, refund=off]."

static rl_noreturn void rl_bad_argument(TriggerData *trigdata, int argno,
										const char *problem);

/* An argument error, naming the trigger and the argument. */
static void
rl_bad_argument(TriggerData *trigdata, int argno, const char *problem)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid argument %d of trigger \"%s\" on table \"%s\": %s",
					argno, trigdata->tg_trigger->tgname,
					RelationGetRelationName(trigdata->tg_relation), problem),
			 errhint(RL_TRIGGER_USAGE)));
}

/*
 * PostgreSQL computes stored generated columns after the BEFORE ROW
 * triggers, which see them as NULL: keyed on one, every row would share
 * the limiter "col=NULL" and one writer would lock out all.  They are
 * there for AFTER triggers (the row form, the transition table).
 */
static void
rl_refuse_generated(TriggerData *trigdata, const char *name, AttrNumber attnum)
{
	Form_pg_attribute att = TupleDescAttr(RelationGetDescr(trigdata->tg_relation),
										  attnum - 1);

	if (att->attgenerated != '\0' &&
		TRIGGER_FOR_BEFORE(trigdata->tg_trigger->tgtype))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("trigger \"%s\" on table \"%s\" cannot use generated column \"%s\"",
						trigdata->tg_trigger->tgname,
						RelationGetRelationName(trigdata->tg_relation), name),
				 errdetail("A BEFORE trigger sees generated columns as NULL, so every row would share one limiter."),
				 errhint("Create the trigger AFTER ... FOR EACH ROW (rl_throttle) or with a transition table (rl_throttle_statement).")));
}

/* A column's number; dropped and system columns do not count as columns. */
static AttrNumber
rl_find_column(TriggerData *trigdata, int argno, const char *name)
{
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (!att->attisdropped && strcmp(NameStr(att->attname), name) == 0)
			return att->attnum;
	}
	rl_bad_argument(trigdata, argno,
					psprintf("column \"%s\" does not exist", name));
	pg_unreachable();
}

/* A window argument, with interval's own syntax error as the detail. */
static int64
rl_parse_window(TriggerData *trigdata, const char *arg)
{
	MemoryContext mcxt = CurrentMemoryContext;
	Interval   *window = NULL;

	PG_TRY();
	{
		window = DatumGetIntervalP(DirectFunctionCall3(interval_in,
													   CStringGetDatum(arg),
													   ObjectIdGetDatum(InvalidOid),
													   Int32GetDatum(-1)));
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* Rethrown at once as our own error; nothing else runs. */
		MemoryContextSwitchTo(mcxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid argument 4 of trigger \"%s\" on table \"%s\": \"%s\" is not an interval",
						trigdata->tg_trigger->tgname,
						RelationGetRelationName(trigdata->tg_relation), arg),
				 errdetail_internal("%s", edata->message),
				 errhint(RL_TRIGGER_USAGE)));
	}
	PG_END_TRY();
	return rl_window_us(window);
}

/*
 * How a key column's values become key text: a form that gives values
 * equal under the column's equality one text whatever the session's
 * settings, or an error naming the column if its type has none.
 */
static RlKeyForm
rl_key_form(TriggerData *trigdata, const char *name, Form_pg_attribute att)
{
	int32		typmod = att->atttypmod;
	Oid			base = getBaseTypeAndTypmod(att->atttypid, &typmod);
	const char *reason;

	switch (base)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case BOOLOID:
		case UUIDOID:
		case INETOID:
		case CIDROID:
			return RL_KEY_OUTPUT;
		case TEXTOID:
		case VARCHAROID:
		case NAMEOID:
		case BPCHAROID:
			if (OidIsValid(att->attcollation) &&
				!get_collation_isdeterministic(att->attcollation))
			{
				reason = psprintf("Its collation \"%s\" is nondeterministic: values it deems equal, such as 'Bob' and 'BOB', have different texts.",
								  get_collation_name(att->attcollation));
				break;
			}
			/* char(n) pads every value to n; bare char keeps what it got. */
			if (base == BPCHAROID && typmod < 0)
				return RL_KEY_BPCHAR;
			return RL_KEY_OUTPUT;
		case NUMERICOID:
			return RL_KEY_NUMERIC;
		case DATEOID:
			return RL_KEY_DATE;
		case TIMESTAMPOID:
			return RL_KEY_TIMESTAMP;
		case TIMESTAMPTZOID:
			return RL_KEY_TIMESTAMPTZ;
		case FLOAT4OID:
		case FLOAT8OID:
			reason = "Equal floating-point values can have different texts (0 and -0), and the text depends on extra_float_digits.";
			break;
		default:
			if (get_typtype(base) == TYPTYPE_ENUM)
				return RL_KEY_OUTPUT;
			reason = "Its values' text can depend on session settings, or differ for values the type deems equal.";
			break;
	}
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("key column \"%s\" of trigger \"%s\" on table \"%s\" has type %s, which cannot be a rate limit key",
					name, trigdata->tg_trigger->tgname,
					RelationGetRelationName(trigdata->tg_relation),
					format_type_be(att->atttypid)),
			 errdetail("%s", reason),
			 errhint("Key the trigger on columns of type smallint, integer, bigint, boolean, uuid, text, varchar, char, numeric, date, timestamp, timestamptz, inet, cidr or an enum (with a deterministic collation), or on a generated column that converts the value to one of them (with an AFTER trigger: BEFORE triggers see generated columns as NULL).")));
	pg_unreachable();
}

/*
 * Refuses a table where some way of writing the rows would not fire the
 * trigger.  Rows written straight into an inheritance child fire none of
 * the parent's triggers.  A statement trigger with a transition table
 * also misses rows written straight into a partition, if it is on a
 * partitioned table, or written through the parent, if it is on a
 * partition or an inheritance child: a statement fires the statement
 * triggers of the table it names only.  Called when the trigger is
 * created and when it fires (a table can gain children in between).
 */
void
rl_trigger_check_table(const char *trigger, Relation rel, bool transition)
{
	Form_pg_class form = rel->rd_rel;
	const char *name = RelationGetRelationName(rel);
	const char *pair_hint = "Use the two-trigger form (a BEFORE ... FOR EACH ROW and an AFTER ... FOR EACH STATEMENT rl_throttle_statement trigger with the same arguments) or rl_throttle, whose row triggers partitions inherit.";

	if (form->relkind == RELKIND_RELATION && form->relhassubclass &&
		find_inheritance_children(RelationGetRelid(rel), NoLock) != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("trigger \"%s\" on table \"%s\" cannot limit the rows of its inheritance children",
						trigger, name),
				 errdetail("Rows written straight into a child table fire none of the parent's triggers."),
				 errhint("Create the trigger on each child table, or make the table a partitioned table.")));
	if (!transition)
		return;
	if (form->relkind == RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("trigger \"%s\" on partitioned table \"%s\" cannot see rows written straight into its partitions",
						trigger, name),
				 errdetail("A statement trigger fires only for statements on its own table, and its transition table holds only their rows."),
				 errhint("%s", pair_hint)));
	if (form->relispartition || has_superclass(RelationGetRelid(rel)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("trigger \"%s\" on table \"%s\" cannot see rows written through its parent table",
						trigger, name),
				 errdetail("A statement on the parent table fires the parent's statement triggers, not those of \"%s\".",
						   name),
				 errhint("%s", pair_hint)));
}

/*
 * The table a trigger was created on.  A row trigger on a partitioned
 * table is cloned onto each partition and fires there; the limiter must
 * be the parent's, or rows of one key landing in different partitions
 * would each get the full limit.  Clones point to their parent trigger.
 */
static Oid
rl_trigger_owner(Trigger *trigger, Relation rel)
{
	Oid			tgoid = trigger->tgoid;
	Oid			relid = RelationGetRelid(rel);
	Relation	catalog;

	if (!trigger->tgisclone)
		return relid;
	catalog = table_open(TriggerRelationId, AccessShareLock);
	while (OidIsValid(tgoid))
	{
		ScanKeyData key;
		SysScanDesc scan;
		HeapTuple	tuple;
		Form_pg_trigger form;

		ScanKeyInit(&key, Anum_pg_trigger_oid, BTEqualStrategyNumber,
					F_OIDEQ, ObjectIdGetDatum(tgoid));
		scan = systable_beginscan(catalog, TriggerOidIndexId, true, NULL, 1, &key);
		tuple = systable_getnext(scan);
		if (!HeapTupleIsValid(tuple))
			elog(ERROR, "could not find trigger %u", tgoid);
		form = (Form_pg_trigger) GETSTRUCT(tuple);
		relid = form->tgrelid;
		tgoid = form->tgparentid;
		systable_endscan(scan);
	}
	table_close(catalog, AccessShareLock);
	return relid;
}

/* Names the trigger in the CONTEXT of any error about its arguments. */
static void
rl_conf_context(void *arg)
{
	TriggerData *trigdata = (TriggerData *) arg;

	errcontext("arguments of trigger \"%s\" on table \"%s\"",
			   trigdata->tg_trigger->tgname,
			   RelationGetRelationName(trigdata->tg_relation));
}

/*
 * The trigger's arguments, checked and cached for the statement: the
 * cache lives in the FmgrInfo, which belongs to this trigger for the
 * duration of one query.
 */
RlTriggerConf *
rl_trigger_conf(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	Trigger    *trigger = trigdata->tg_trigger;
	Relation	rel = trigdata->tg_relation;
	RlTriggerConf *conf = (RlTriggerConf *) fcinfo->flinfo->fn_extra;
	ErrorContextCallback context;
	MemoryContext old;
	char	  **args = trigger->tgargs;
	char	   *names;
	List	   *cols;
	ListCell   *lc;
	char	   *end;
	int			i;
	int			nargs;
	int			given;
	int			refund;
	int			ondeny_arg = 4;	/* from 0: on_deny, then the cost column */
	bool		policy;
	Oid			owner;

	if (conf != NULL && conf->tgoid == trigger->tgoid)
		return conf;

	/* The table first: no argument of a trigger on it could help. */
	rl_trigger_check_table(trigger->tgname, rel,
						   TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event) &&
						   trigger->tgnewtable != NULL);

	context.callback = rl_conf_context;
	context.arg = trigdata;
	context.previous = error_context_stack;
	error_context_stack = &context;

	old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	conf = palloc0(sizeof(RlTriggerConf));
	conf->tgoid = trigger->tgoid;
	conf->trigger = pstrdup(trigger->tgname);
	owner = rl_trigger_owner(trigger, rel);
	conf->relid = owner;
	conf->after = TRIGGER_FIRED_AFTER(trigdata->tg_event);
	conf->table = quote_qualified_identifier(get_namespace_name(get_rel_namespace(owner)),
											 get_rel_name(owner));

	/*
	 * "policy=NAME" in second place names a policy of rl_policies (0.5.0)
	 * in place of algorithm, limit and window; on_deny and the cost column
	 * follow it.  Otherwise a last argument "burst=N" sets the capacity
	 * (token_bucket, leaky_bucket, gcra); the ones before it keep their
	 * places.
	 */
	nargs = trigger->tgnargs;

	/*
	 * A last argument "refund=on" or "refund=off" (0.6.0) says whether the
	 * rows' charges are given back when their transaction or savepoint
	 * aborts; on by default, since a rolled-back row was never written.
	 */
	refund = RL_REFUND_ON;
	if (nargs >= 2 && strncmp(args[nargs - 1], "refund=", 7) == 0)
	{
		bool		on;

		if (!parse_bool(args[nargs - 1] + 7, &on))
			rl_bad_argument(trigdata, nargs,
							psprintf("refund must be \"on\" or \"off\", not \"%s\"",
									 args[nargs - 1] + 7));
		refund = on ? RL_REFUND_ON : RL_REFUND_OFF;
		nargs--;
	}
	given = nargs;
	policy = nargs >= 2 && strncmp(args[1], "policy=", 7) == 0;
	if (policy)
	{
		if (nargs > 4)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("trigger \"%s\" on table \"%s\" has %d arguments with \"policy=\", not 2 to 4",
							trigger->tgname, RelationGetRelationName(rel),
							nargs),
					 errhint(RL_TRIGGER_POLICY_USAGE)));
		ondeny_arg = 2;
	}
	else if (nargs >= 5 && strncmp(args[nargs - 1], "burst=", 6) == 0)
		nargs--;
	if (!policy && (nargs < 4 || nargs > 6))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 nargs < given ?
				 errmsg("trigger \"%s\" on table \"%s\" has %d arguments before \"burst=\", not 4 to 6",
						trigger->tgname, RelationGetRelationName(rel),
						nargs) :
				 errmsg("trigger \"%s\" on table \"%s\" has %d arguments, not 4 to 6",
						trigger->tgname, RelationGetRelationName(rel),
						nargs),
				 errhint(RL_TRIGGER_USAGE)));

	/* 1: key columns, as identifiers: unquoted names fold to lower case. */
	names = pstrdup(args[0]);
	if (!SplitIdentifierString(names, ',', &cols) || cols == NIL)
		rl_bad_argument(trigdata, 1, "expected a comma-separated list of column names");
	conf->ncols = list_length(cols);
	conf->cols = palloc(sizeof(AttrNumber) * conf->ncols);
	conf->colnames = palloc(sizeof(char *) * conf->ncols);
	conf->privcols = palloc(sizeof(AttrNumber) * conf->ncols);
	conf->outfuncs = palloc(sizeof(FmgrInfo) * conf->ncols);
	conf->forms = palloc(sizeof(RlKeyForm) * conf->ncols);
	i = 0;
	foreach(lc, cols)
	{
		char	   *name = (char *) lfirst(lc);
		Oid			typoutput;
		bool		varlena;

		conf->cols[i] = rl_find_column(trigdata, 1, name);
		rl_refuse_generated(trigdata, name, conf->cols[i]);
		for (int j = 0; j < i; j++)
		{
			if (conf->cols[j] == conf->cols[i])
				rl_bad_argument(trigdata, 1,
								psprintf("column \"%s\" is listed twice", name));
		}
		conf->colnames[i] = pstrdup(quote_identifier(name));
		conf->privcols[i] = get_attnum(owner, name);
		conf->forms[i] = rl_key_form(trigdata, name,
									 TupleDescAttr(RelationGetDescr(rel), conf->cols[i] - 1));
		getTypeOutputInfo(TupleDescAttr(RelationGetDescr(rel), conf->cols[i] - 1)->atttypid,
						  &typoutput, &varlena);
		fmgr_info_cxt(typoutput, &conf->outfuncs[i], fcinfo->flinfo->fn_mcxt);
		i++;
	}

	/* 2: the policy's limiter, as the calls by name find it. */
	if (policy)
		rl_policy_get(args[1] + 7, strlen(args[1] + 7), &conf->limiter);

	/* 2 to 4: the limiter, checked as rl_allow checks its arguments. */
	else
	{
		conf->limiter.algorithm = rl_parse_algorithm(cstring_to_text(args[1]));
		errno = 0;
		conf->limiter.limit = strtoi64(args[2], &end, 10);
		if (errno != 0 || end == args[2] || *end != '\0')
			rl_bad_argument(trigdata, 3,
							psprintf("limit \"%s\" is not a whole number", args[2]));
		conf->limiter.window_us = rl_parse_window(trigdata, args[3]);
		if (nargs < given)
		{
			const char *text = args[nargs] + 6;

			errno = 0;
			conf->limiter.burst = strtoi64(text, &end, 10);
			if (errno != 0 || end == text || *end != '\0' ||
				conf->limiter.burst < 1)
				rl_bad_argument(trigdata, nargs + 1,
								psprintf("burst \"%s\" is not a whole number of at least 1",
										 text));
		}
		rl_check_limiter(&conf->limiter);
	}

	conf->limiter.refund = refund;

	/* 5 (3 after a policy): on_deny */
	if (nargs > ondeny_arg)
	{
		if (strcmp(args[ondeny_arg], "skip") == 0)
			conf->skip = true;
		else if (strcmp(args[ondeny_arg], "raise") != 0)
			rl_bad_argument(trigdata, ondeny_arg + 1,
							psprintf("on_deny must be \"raise\" or \"skip\", not \"%s\"",
									 args[ondeny_arg]));
	}

	/* 6 (4 after a policy): cost column, of an integer type */
	if (nargs > ondeny_arg + 1)
	{
		const char *costarg = args[ondeny_arg + 1];

		conf->costname = pstrdup(costarg);
		conf->costcol = rl_find_column(trigdata, ondeny_arg + 2, costarg);
		conf->privcost = get_attnum(owner, costarg);
		rl_refuse_generated(trigdata, costarg, conf->costcol);
		conf->costtype = TupleDescAttr(RelationGetDescr(rel), conf->costcol - 1)->atttypid;
		if (conf->costtype != INT2OID && conf->costtype != INT4OID &&
			conf->costtype != INT8OID)
			rl_bad_argument(trigdata, ondeny_arg + 2,
							psprintf("cost column \"%s\" must be of type smallint, integer or bigint",
									 costarg));
	}

	error_context_stack = context.previous;
	MemoryContextSwitchTo(old);
	fcinfo->flinfo->fn_extra = conf;
	return conf;
}

/*
 * A key column value's text, in the column's form (rl_key_form): the
 * same for equal values under any settings.  For the common types it is
 * the output text, as in 0.1.0, so their limiters survive the upgrade.
 */
static char *
rl_key_text(RlTriggerConf *conf, int col, Datum value)
{
	char		buf[MAXDATELEN + 1];
	struct pg_tm tm;
	fsec_t		fsec;
	char	   *text;
	int			len;

	switch (conf->forms[col])
	{
		case RL_KEY_OUTPUT:
			break;
		case RL_KEY_BPCHAR:
			text = OutputFunctionCall(&conf->outfuncs[col], value);
			len = strlen(text);
			while (len > 0 && text[len - 1] == ' ')
				text[--len] = '\0';
			return text;
		case RL_KEY_NUMERIC:
			/* 1.50 = 1.5: drop the zeros scale added.  NaN has no point. */
			text = OutputFunctionCall(&conf->outfuncs[col], value);
			if (strchr(text, '.') != NULL)
			{
				len = strlen(text);
				while (text[len - 1] == '0')
					text[--len] = '\0';
				if (text[len - 1] == '.')
					text[--len] = '\0';
			}
			return text;
		case RL_KEY_DATE:
			{
				DateADT		date = DatumGetDateADT(value);

				if (DATE_NOT_FINITE(date))
					EncodeSpecialDate(date, buf);
				else
				{
					j2date(date + POSTGRES_EPOCH_JDATE,
						   &tm.tm_year, &tm.tm_mon, &tm.tm_mday);
					EncodeDateOnly(&tm, USE_ISO_DATES, buf);
				}
				return pstrdup(buf);
			}
		case RL_KEY_TIMESTAMP:
		case RL_KEY_TIMESTAMPTZ:
			{
				Timestamp	ts = DatumGetTimestamp(value);

				/* Without a time zone to convert to, the fields are UTC's. */
				if (TIMESTAMP_NOT_FINITE(ts))
					EncodeSpecialTimestamp(ts, buf);
				else if (timestamp2tm(ts, NULL, &tm, &fsec, NULL, NULL) == 0)
				{
					tm.tm_isdst = 0;	/* or the zone (+00) is left out */
					EncodeDateTime(&tm, fsec,
								   conf->forms[col] == RL_KEY_TIMESTAMPTZ, 0,
								   NULL, USE_ISO_DATES, buf);
				}
				else
					ereport(ERROR,
							(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
							 errmsg("timestamp out of range")));
				return pstrdup(buf);
			}
	}
	return OutputFunctionCall(&conf->outfuncs[col], value);
}

/*
 * A copy of a configuration in cxt, for counts that may be checked after
 * the statement that made them has gone (rl_trigger_statement.c).
 */
RlTriggerConf *
rl_trigger_conf_copy(const RlTriggerConf *conf, MemoryContext cxt)
{
	MemoryContext old = MemoryContextSwitchTo(cxt);
	RlTriggerConf *copy = palloc(sizeof(RlTriggerConf));

	*copy = *conf;
	copy->trigger = pstrdup(conf->trigger);
	copy->table = pstrdup(conf->table);
	copy->cols = palloc(sizeof(AttrNumber) * conf->ncols);
	memcpy(copy->cols, conf->cols, sizeof(AttrNumber) * conf->ncols);
	copy->colnames = palloc(sizeof(char *) * conf->ncols);
	copy->privcols = palloc(sizeof(AttrNumber) * conf->ncols);
	memcpy(copy->privcols, conf->privcols, sizeof(AttrNumber) * conf->ncols);
	copy->outfuncs = palloc(sizeof(FmgrInfo) * conf->ncols);
	copy->forms = palloc(sizeof(RlKeyForm) * conf->ncols);
	for (int i = 0; i < conf->ncols; i++)
	{
		copy->colnames[i] = pstrdup(conf->colnames[i]);
		fmgr_info_cxt(conf->outfuncs[i].fn_oid, &copy->outfuncs[i], cxt);
		copy->forms[i] = conf->forms[i];
	}
	copy->costname = conf->costname ? pstrdup(conf->costname) : NULL;
	copy->limiter.name = conf->limiter.name ? pstrdup(conf->limiter.name) : NULL;
	copy->statement = NULL;
	MemoryContextSwitchTo(old);
	return copy;
}

/*
 * Builds a limiter key (table:col='value',...) from key column values,
 * and, unless desc is NULL, the description errors show ((col, ...)=
 * (value, ...), as unique violations do).
 */
void
rl_trigger_key_values(RlTriggerConf *conf, const Datum *values,
					  const bool *nulls, StringInfo key, StringInfo desc)
{
	resetStringInfo(key);
	appendStringInfoString(key, conf->table);
	appendStringInfoChar(key, ':');
	if (desc)
	{
		resetStringInfo(desc);
		appendStringInfoChar(desc, '(');
		for (int i = 0; i < conf->ncols; i++)
		{
			if (i > 0)
				appendStringInfoString(desc, ", ");
			appendStringInfoString(desc, conf->colnames[i]);
		}
		appendStringInfoString(desc, ")=(");
	}
	for (int i = 0; i < conf->ncols; i++)
	{
		if (i > 0)
		{
			appendStringInfoChar(key, ',');
			if (desc)
				appendStringInfoString(desc, ", ");
		}
		appendStringInfoString(key, conf->colnames[i]);
		appendStringInfoChar(key, '=');
		if (nulls[i])
		{
			appendStringInfoString(key, "NULL");
			if (desc)
				appendStringInfoString(desc, "null");
		}
		else
		{
			char	   *text = rl_key_text(conf, i, values[i]);

			appendStringInfoString(key, quote_literal_cstr(text));
			if (desc)
				appendStringInfoString(desc, text);
		}
	}
	if (desc)
		appendStringInfoChar(desc, ')');
}

/* The same for the row in a slot. */
void
rl_trigger_key(RlTriggerConf *conf, TupleTableSlot *slot, StringInfo key,
			   StringInfo desc)
{
	Datum	   *values = palloc(sizeof(Datum) * conf->ncols);
	bool	   *nulls = palloc(sizeof(bool) * conf->ncols);

	for (int i = 0; i < conf->ncols; i++)
		values[i] = slot_getattr(slot, conf->cols[i], &nulls[i]);
	rl_trigger_key_values(conf, values, nulls, key, desc);
}

/* A row's cost: 1, or its cost column's value, which must not be NULL. */
int64
rl_trigger_cost(RlTriggerConf *conf, TupleTableSlot *slot)
{
	bool		isnull;
	Datum		value;

	if (conf->costcol == 0)
		return 1;
	value = slot_getattr(slot, conf->costcol, &isnull);
	return rl_trigger_cost_value(conf, value, isnull);
}

/* The same, from the cost column's value already read. */
int64
rl_trigger_cost_value(RlTriggerConf *conf, Datum value, bool isnull)
{
	int64		cost;

	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("cost column \"%s\" of table \"%s\" must not be null",
						conf->costname, conf->table),
				 errdetail("Trigger \"%s\" takes each row's cost from it.",
						   conf->trigger)));
	if (conf->costtype == INT2OID)
		cost = DatumGetInt16(value);
	else if (conf->costtype == INT4OID)
		cost = DatumGetInt32(value);
	else
		cost = DatumGetInt64(value);
	if (cost < 0 || cost > rl_capacity(&conf->limiter))
	{
		bool		show = rl_trigger_may_read(conf, true);

		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 cost < 0 ?
				 errmsg("cost column \"%s\" of table \"%s\" holds a negative cost, which trigger \"%s\" cannot charge",
						conf->costname, conf->table, conf->trigger) :
				 errmsg("cost column \"%s\" of table \"%s\" holds a cost above the %s " INT64_FORMAT " of trigger \"%s\"",
						conf->costname, conf->table,
						conf->limiter.burst > 0 ? "burst" : "limit",
						rl_capacity(&conf->limiter), conf->trigger),
				 show ? errdetail("The row's cost is " INT64_FORMAT ".", cost) : 0,
				 cost < 0 ? 0 :
				 conf->limiter.burst > 0 ?
				 errhint("A row that costs more than the burst can never be written.") :
				 errhint("A row that costs more than the limit can never be written.")));
	}
	return cost;
}

/*
 * True if the current user may see the row's key values (and its cost,
 * with_cost) in a message.  The rule is PostgreSQL's for the DETAIL of a
 * unique violation (BuildIndexValueDescription): no row-level security on
 * the table, and SELECT on it or on each column shown.  A role may be
 * allowed to UPDATE rows whose key it may not read.
 */
bool
rl_trigger_may_read(RlTriggerConf *conf, bool with_cost)
{
	Oid			user = GetUserId();

	if (check_enable_rls(conf->relid, InvalidOid, true) == RLS_ENABLED)
		return false;
	if (pg_class_aclcheck(conf->relid, user, ACL_SELECT) == ACLCHECK_OK)
		return true;
	for (int i = 0; i < conf->ncols; i++)
	{
		if (conf->privcols[i] == InvalidAttrNumber ||
			pg_attribute_aclcheck(conf->relid, conf->privcols[i], user,
								  ACL_SELECT) != ACLCHECK_OK)
			return false;
	}
	if (with_cost && conf->costcol != 0 &&
		(conf->privcost == InvalidAttrNumber ||
		 pg_attribute_aclcheck(conf->relid, conf->privcost, user,
							   ACL_SELECT) != ACLCHECK_OK))
		return false;
	return true;
}

/* The Redis key of a limiter key; too long a key is an error. */
char *
rl_trigger_redis_key(RlTriggerConf *conf, const char *key)
{
	int			len = strlen(key);

	if (len > RL_MAX_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rate limit key of trigger \"%s\" on table \"%s\" is longer than %d bytes",
						conf->trigger, conf->table, RL_MAX_KEY_BYTES),
				 errdetail("The key is the table name with the key columns' names and values."),
				 errhint("Key the trigger on shorter columns.")));
	return rl_redis_key(key, len, &conf->limiter);
}

/*
 * Raises a trigger's denial: SQLSTATE PT429, or inside a PostgREST request
 * the form that makes PostgREST answer 429 with a Retry-After header.
 */
void
rl_trigger_raise(RlTriggerConf *conf, const char *detail, const char *hint,
				 const RlAnswer *answer)
{
	char	   *message;

	if (conf->limiter.algorithm == RL_CONCURRENCY)
		message = psprintf("concurrency limit of " INT64_FORMAT " exceeded on table \"%s\"",
						   conf->limiter.limit, conf->table);
	else
		message = psprintf("rate limit of " INT64_FORMAT " per %s exceeded on table \"%s\"",
						   conf->limiter.limit,
						   rl_window_text(conf->limiter.window_us), conf->table);
	if (rl_in_postgrest_request())
		rl_raise_postgrest(message, detail, hint, answer, &conf->limiter);
	ereport(ERROR,
			(errcode(RL_ERRCODE_RATE_LIMITED),
			 errmsg_internal("%s", message),
			 errdetail_internal("%s", detail),
			 errhint("%s", hint)));
	pg_unreachable();
}

/* The denial of a key (desc) that Redis, or the failure policy, refused. */
void
rl_trigger_denied(RlTriggerConf *conf, const char *desc, const RlAnswer *answer)
{
	char	   *detail;

	if (!answer->known)
		detail = psprintf("Redis is unavailable and ratelimit.failure_mode is \"closed\". Retry after " INT64_FORMAT " ms.",
						  answer->retry_after_ms);
	else if (rl_trigger_may_read(conf, false))
		detail = psprintf("Key %s is over the limit. Retry after " INT64_FORMAT " ms.",
						  desc, answer->retry_after_ms);
	else
		detail = psprintf("The row's key is over the limit. Retry after " INT64_FORMAT " ms.",
						  answer->retry_after_ms);
	rl_trigger_raise(conf, detail,
					 psprintf("Trigger \"%s\" limits the rows written per key; try again after the wait.",
							  conf->trigger),
					 answer);
}

/*
 * rl_throttle(): BEFORE or AFTER INSERT OR UPDATE ... FOR EACH ROW
 *
 * One check per row, of the row's key with the row's cost.  Denied:
 * 'raise' fails the statement (the checks of earlier rows stay spent, as
 * every Redis limit does, even if the transaction rolls back); 'skip'
 * drops this row and lets the statement go on (BEFORE only).  An AFTER
 * trigger fires once row-level security and constraints passed the row.
 */
Datum
rl_throttle(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	RlTriggerConf *conf;
	TupleTableSlot *slot;
	HeapTuple	row;
	StringInfoData key;
	StringInfoData desc;
	char	   *redis_key;
	int64		cost;
	RlAnswer	answer;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_throttle: not called by the trigger manager")));
	if (TRIGGER_FIRED_INSTEAD(trigdata->tg_event) ||
		!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event) ||
		!(TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) ||
		  TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event)))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_throttle must be fired BEFORE or AFTER INSERT or UPDATE FOR EACH ROW"),
				 errhint("For statement-level throttling use rl_throttle_statement in an AFTER ... FOR EACH STATEMENT trigger.")));

	conf = rl_trigger_conf(fcinfo, trigdata);
	if (conf->skip && conf->after)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid argument 5 of trigger \"%s\" on table \"%s\": an AFTER trigger cannot skip rows",
						conf->trigger, RelationGetRelationName(trigdata->tg_relation)),
				 errdetail("An AFTER trigger fires once the row is written."),
				 errhint("Use \"raise\", or a BEFORE ... FOR EACH ROW trigger to skip rows.")));
	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		slot = trigdata->tg_newslot;
		row = trigdata->tg_newtuple;
	}
	else
	{
		slot = trigdata->tg_trigslot;
		row = trigdata->tg_trigtuple;
	}

	initStringInfo(&key);
	initStringInfo(&desc);
	rl_trigger_key(conf, slot, &key, &desc);
	cost = rl_trigger_cost(conf, slot);
	if (conf->after)
		row = NULL;				/* an AFTER trigger's result is ignored */
	if (cost == 0)
		return PointerGetDatum(row);	/* consumes nothing, cannot be denied */
	redis_key = rl_trigger_redis_key(conf, key.data);

	rl_engine_check_rules(&redis_key, &conf->limiter, &cost, 1, &answer);

	if (answer.allowed)
		return PointerGetDatum(row);
	if (conf->skip)
		return PointerGetDatum(NULL);
	rl_trigger_denied(conf, desc.data, &answer);
}
