/*-------------------------------------------------------------------------
 *
 * rl_policies.c
 *	  Named policies (0.5.0): the rl_policies table, its checks, and a
 *	  cache of it in each backend.
 *
 * A policy is a row of rl_policies: a name, the parameters of a limiter,
 * and its own enforce and failure_mode.  The by-name calls find it here:
 *
 * - the cache: name -> limiter, per backend, filled on a miss by one
 *   index scan of the table (read-only, so a hot standby serves it too);
 *   no catalog access on a hit, the table's OID being cached as well;
 * - dropped whole by the table's relcache invalidation.  Writing a row
 *   sends none by itself, so the table's triggers send one: the row
 *   trigger (rl_policies_check, which first checks the row with the
 *   checks of a call's arguments, rl_args.c) and the statement trigger
 *   after DELETE and TRUNCATE (rl_policies_changed).  The invalidation is
 *   transactional: other backends see it at the commit (and the writer at
 *   its next command), and it is WAL-logged with the commit, so a hot
 *   standby's backends drop their caches too.
 *
 * A policy's limiter names the policy (RlLimiter.name), so its store key
 * is the key and the policy's name and algorithm, never its limit, window
 * or burst (rl_redis_key): a changed limit keeps each key's state, which
 * the stores carry over (RlLimiter.carry).
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_policies.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "rl_args.h"
#include "rl_policies.h"
#include "rl_stats.h"

PG_FUNCTION_INFO_V1(rl_policies_check);
PG_FUNCTION_INFO_V1(rl_policies_changed);

/* rl_policies' columns, in the order of the table's definition. */
enum
{
	RL_POL_NAME,
	RL_POL_ALGO,
	RL_POL_LIMIT,
	RL_POL_WINDOW,
	RL_POL_BURST,
	RL_POL_ENFORCE,
	RL_POL_FAILURE_MODE,
	RL_POL_DESCRIPTION,
	RL_POL_REFUND,				/* 0.6.0 */
	RL_POL_NATTS
};

/* A catalog of 0.5.0, not yet updated, has no refund_on_abort. */
#define RL_POL_NATTS_0_5	RL_POL_REFUND

/* Whether a tuple descriptor is rl_policies' of this version or 0.5.0's. */
static inline bool
rl_policies_shape(TupleDesc desc)
{
	return desc->natts == RL_POL_NATTS || desc->natts == RL_POL_NATTS_0_5;
}

typedef struct RlPolicyEntry
{
	char		name[RL_MAX_POLICY_NAME + 1];	/* the hash key */
	RlLimiter	limiter;
} RlPolicyEntry;

static HTAB *rl_policy_cache = NULL;
static Oid	rl_policies_relid = InvalidOid;
static Oid	rl_policies_index = InvalidOid;
static bool rl_policies_stale = false;
static bool rl_policies_registered = false;

/*
 * The relcache callback: rl_policies changed (or every relation did, as
 * after a lost invalidation queue).  Only a flag is set here; the next
 * lookup drops the cache and the table's OID.
 */
static void
rl_policies_invalidate(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == rl_policies_relid)
		rl_policies_stale = true;
}

/* Drops what the cache knows, after an invalidation. */
static void
rl_policies_reset(void)
{
	if (rl_policy_cache != NULL)
		hash_destroy(rl_policy_cache);
	rl_policy_cache = NULL;
	rl_policies_relid = InvalidOid;
	rl_policies_index = InvalidOid;
	rl_policies_stale = false;
}

/* A policy nobody defined: its own SQLSTATE, so callers can tell. */
static void
rl_policy_unknown(const char *name, int len)
{
	int			shown = pg_mbcliplen(name, len,
									 Min(len, RL_MAX_POLICY_NAME + 1));

	ereport(ERROR,
			(errcode(RL_ERRCODE_NO_POLICY),
			 errmsg("rate limit policy \"%s%s\" does not exist",
					pnstrdup(name, shown), shown < len ? "..." : ""),
			 errhint("Policies are the rows of the table rl_policies.")));
}

/*
 * A row's limiter, checked as a call's arguments are (rl_args.c): the
 * same rules, the same SQLSTATEs.  The not-null columns are not null
 * here (the caller saw to it).
 */
static void
rl_policy_from_row(const Datum *values, const bool *nulls, int natts,
				   RlLimiter *l)
{
	text	   *name = DatumGetTextPP(values[RL_POL_NAME]);

	memset(l, 0, sizeof(RlLimiter));
	rl_check_policy_name(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	l->algorithm = rl_parse_algorithm(DatumGetTextPP(values[RL_POL_ALGO]));
	l->limit = DatumGetInt64(values[RL_POL_LIMIT]);
	l->window_us = rl_window_us(DatumGetIntervalP(values[RL_POL_WINDOW]));
	l->burst = nulls[RL_POL_BURST] ? 0 :
		rl_check_burst(DatumGetInt64(values[RL_POL_BURST]));
	rl_check_limiter(l);
	l->shadow = !nulls[RL_POL_ENFORCE] && !DatumGetBool(values[RL_POL_ENFORCE]);
	if (!nulls[RL_POL_FAILURE_MODE])
		l->failure_mode = 1 +
			rl_parse_failure_mode(TextDatumGetCString(values[RL_POL_FAILURE_MODE]));
	l->carry = true;
	l->refund = natts > RL_POL_REFUND && !nulls[RL_POL_REFUND] &&
		DatumGetBool(values[RL_POL_REFUND]) ? RL_REFUND_ON : RL_REFUND_OFF;
}

#if PG_VERSION_NUM < 160000
/* The schema of an extension (PostgreSQL 16 exports its own). */
static Oid
get_extension_schema(Oid ext_oid)
{
	Oid			result = InvalidOid;
	Relation	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyData entry[1];
	SysScanDesc scandesc;
	HeapTuple	tuple;

	ScanKeyInit(&entry[0], Anum_pg_extension_oid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(ext_oid));
	scandesc = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1,
								  entry);
	tuple = systable_getnext(scandesc);
	if (HeapTupleIsValid(tuple))
		result = ((Form_pg_extension) GETSTRUCT(tuple))->extnamespace;
	systable_endscan(scandesc);
	table_close(rel, AccessShareLock);
	return result;
}
#endif

/*
 * Finds rl_policies and its primary key in the extension's schema: once,
 * then after each invalidation.
 */
static void
rl_policies_locate(void)
{
	Oid			ext = get_extension_oid("ratelimit", true);
	Oid			nsp = OidIsValid(ext) ? get_extension_schema(ext) : InvalidOid;
	Oid			relid = OidIsValid(nsp) ?
		get_relname_relid("rl_policies", nsp) : InvalidOid;
	Oid			index = OidIsValid(nsp) ?
		get_relname_relid("rl_policies_pkey", nsp) : InvalidOid;

	if (!OidIsValid(relid) || !OidIsValid(index))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the table rl_policies does not exist"),
				 errhint("Run ALTER EXTENSION ratelimit UPDATE.")));
	if (!rl_policies_registered)
	{
		CacheRegisterRelcacheCallback(rl_policies_invalidate, (Datum) 0);
		rl_policies_registered = true;
	}
	rl_policies_relid = relid;
	rl_policies_index = index;
}

/*
 * Reads the policy name (NUL-terminated) from the table: one scan of its
 * primary key under the latest snapshot.  False when there is none.
 */
static bool
rl_policies_read(const char *name, RlLimiter *limiter)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData skey;
	Snapshot	snapshot;
	HeapTuple	tuple;
	bool		found = false;

	if (!OidIsValid(rl_policies_relid))
		rl_policies_locate();
	rel = table_open(rl_policies_relid, AccessShareLock);
	if (!rl_policies_shape(RelationGetDescr(rel)))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the table rl_policies has %d columns, not %d",
						RelationGetDescr(rel)->natts, RL_POL_NATTS),
				 errdetail("Its columns were changed by hand.")));
	ScanKeyEntryInitialize(&skey, 0, RL_POL_NAME + 1, BTEqualStrategyNumber,
						   InvalidOid, C_COLLATION_OID, F_TEXTEQ,
						   CStringGetTextDatum(name));
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	scan = systable_beginscan(rel, rl_policies_index, true, snapshot, 1, &skey);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		Datum		values[RL_POL_NATTS];
		bool		nulls[RL_POL_NATTS];

		heap_deform_tuple(tuple, RelationGetDescr(rel), values, nulls);
		rl_policy_from_row(values, nulls, RelationGetDescr(rel)->natts, limiter);
		found = true;
	}
	systable_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * The limiter of a policy: from the cache, or read and cached.  The
 * limiter's name is a copy in the caller's memory context, so that it
 * outlives an invalidation that drops the cache under the caller.
 */
void
rl_policy_get(const char *name, int len, RlLimiter *limiter)
{
	char		key[RL_MAX_POLICY_NAME + 1];
	RlPolicyEntry *entry = NULL;

	if (!rl_policy_name_ok(name, len))
		rl_policy_unknown(name, len);
	memcpy(key, name, len);
	key[len] = '\0';
	if (unlikely(rl_policies_stale))
		rl_policies_reset();
	if (likely(rl_policy_cache != NULL))
		entry = hash_search(rl_policy_cache, key, HASH_FIND, NULL);
	if (unlikely(entry == NULL))
	{
		RlLimiter	read;

		if (!rl_policies_read(key, &read))
			rl_policy_unknown(name, len);
		read.policy = rl_stats_policy_slot(key);
		if (rl_policies_stale)
		{
			/* Changed while read: this answer is fresh, but not kept. */
			rl_policies_reset();
			*limiter = read;
			limiter->name = pnstrdup(key, len);
			return;
		}
		if (rl_policy_cache == NULL)
		{
			HASHCTL		ctl;

			ctl.keysize = RL_MAX_POLICY_NAME + 1;
			ctl.entrysize = sizeof(RlPolicyEntry);
			ctl.hcxt = TopMemoryContext;
			rl_policy_cache = hash_create("ratelimit policies", 64, &ctl,
										  HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		}
		entry = hash_search(rl_policy_cache, key, HASH_ENTER, NULL);
		entry->limiter = read;
	}
	*limiter = entry->limiter;
	limiter->name = pnstrdup(key, len);
}

void
rl_policy_get_text(const struct varlena *name, RlLimiter *limiter)
{
	rl_policy_get(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name), limiter);
}

/*
 * rl_policies_check(): BEFORE INSERT OR UPDATE ... FOR EACH ROW on
 * rl_policies.  Checks the new row as a call's arguments are checked (an
 * ERROR with their SQLSTATE writes nothing), then tells every backend to
 * drop its cache of policies when the change commits.
 */
Datum
rl_policies_check(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;
	HeapTuple	tuple;
	TupleDesc	desc;
	Datum		values[RL_POL_NATTS];
	bool		nulls[RL_POL_NATTS];
	RlLimiter	limiter;

	if (!CALLED_AS_TRIGGER(fcinfo) || !TRIGGER_FIRED_FOR_ROW(td->tg_event) ||
		!TRIGGER_FIRED_BEFORE(td->tg_event) ||
		TRIGGER_FIRED_BY_DELETE(td->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_policies_check() must be fired BEFORE INSERT OR UPDATE FOR EACH ROW")));
	tuple = TRIGGER_FIRED_BY_UPDATE(td->tg_event) ?
		td->tg_newtuple : td->tg_trigtuple;
	desc = RelationGetDescr(td->tg_relation);
	if (!rl_policies_shape(desc))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the table rl_policies has %d columns, not %d",
						desc->natts, RL_POL_NATTS)));
	heap_deform_tuple(tuple, desc, values, nulls);

	/* A null in a NOT NULL column: the constraint says so, after us. */
	if (!nulls[RL_POL_NAME] && !nulls[RL_POL_ALGO] && !nulls[RL_POL_LIMIT] &&
		!nulls[RL_POL_WINDOW])
		rl_policy_from_row(values, nulls, desc->natts, &limiter);
	CacheInvalidateRelcacheByRelid(RelationGetRelid(td->tg_relation));
	return PointerGetDatum(tuple);
}

/*
 * rl_policies_changed(): AFTER DELETE OR TRUNCATE ... FOR EACH STATEMENT
 * on rl_policies.  Rows gone send no invalidation of their own.
 */
Datum
rl_policies_changed(PG_FUNCTION_ARGS)
{
	TriggerData *td = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("rl_policies_changed() must be fired as a trigger")));
	CacheInvalidateRelcacheByRelid(RelationGetRelid(td->tg_relation));
	return PointerGetDatum(NULL);
}
