/*-------------------------------------------------------------------------
 *
 * ratelimit.c
 *	  SQL entry points: rl_allow, rl_peek, rl_reset, rl_status and rl_ping,
 *	  with the forms of the first three by policy name (0.5.0).
 *
 * Each checks its arguments, hands the check to the engine and builds its
 * row (rl_result, rl_status); _PG_init defines the settings.  The check
 * itself is the engine's (rl_engine.c, whose banner follows its steps):
 * in Redis, one script call of the algorithm on the backend's connection, which Redis runs atomically with its own
 * clock, so any number of sessions, on any number of PostgreSQL servers,
 * share one exact limiter.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/ratelimit.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
#include "utils/typcache.h"

#include "rl_args.h"
#include "rl_cache.h"
#include "rl_engine.h"
#include "rl_policies.h"
#include "rl_stats.h"
#include "trigger/rl_trigger.h"

PG_MODULE_MAGIC;

PGDLLEXPORT void _PG_init(void);

PG_FUNCTION_INFO_V1(rl_allow);
PG_FUNCTION_INFO_V1(rl_peek);
PG_FUNCTION_INFO_V1(rl_reset);
PG_FUNCTION_INFO_V1(rl_status);
PG_FUNCTION_INFO_V1(rl_allow_policy);
PG_FUNCTION_INFO_V1(rl_peek_policy);
PG_FUNCTION_INFO_V1(rl_reset_policy);
PG_FUNCTION_INFO_V1(rl_ping);

/*
 * The settings and the deny cache's shared reset counter.  The connection
 * is opened on first use, in the backend, never in the postmaster, whose
 * sockets every child would share.  The library must be preloaded (see
 * rl_require_preload).
 */
void
_PG_init(void)
{
	rl_preloaded = process_shared_preload_libraries_in_progress;
	rl_define_settings();
	if (rl_preloaded)
	{
		rl_cache_init();
		rl_stats_init();
		rl_engine_init();
		rl_trigger_hooks_init();
	}
}

/*
 * The rl_result descriptor.  The executor makes a new FmgrInfo for every
 * execution of a statement, so a descriptor kept in fn_extra alone was
 * looked up again (a syscache search and two copies) on every call of a
 * prepared statement.  The type cache's own descriptor of the call's
 * result type is used instead, at once, before anything could invalidate
 * it; its entry is kept here, so a call does no lookup at all.  A call
 * with no expression (no result type known) looks the descriptor up.
 */
static TupleDesc
rl_result_desc(FunctionCallInfo fcinfo)
{
	/* The type cache never frees an entry: the last one used is kept. */
	static TypeCacheEntry *tc = NULL;
	TupleDesc	desc = (TupleDesc) fcinfo->flinfo->fn_extra;
	Oid			typid = get_fn_expr_rettype(fcinfo->flinfo);

	if (desc == NULL && OidIsValid(typid) && typid != RECORDOID)
	{
		/* An invalidated descriptor is NULL until looked up again. */
		if (tc == NULL || tc->type_id != typid || tc->tupDesc == NULL)
			tc = lookup_type_cache(typid, TYPECACHE_TUPDESC);
		if (tc->tupDesc != NULL && tc->tupDesc->natts == 4)
			return tc->tupDesc;
	}
	if (desc == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);

		if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		desc = BlessTupleDesc(CreateTupleDescCopy(desc));
		MemoryContextSwitchTo(old);
		fcinfo->flinfo->fn_extra = desc;
	}
	return desc;
}

/*
 * Shared by rl_allow and rl_peek: argument checks, then one check.
 * burstarg is the position of the burst argument, which 0.1.0 and 0.2.0
 * definitions lack (rl_burst_arg).
 */
static Datum
rl_allow_internal(FunctionCallInfo fcinfo, int64 cost, int burstarg)
{
	RlLimiter	limiter = {0};
	RlAnswer	answer;
	char	   *key;
	int			keylen;

	key = rl_check_key(PG_GETARG_TEXT_PP(0), &keylen);
	limiter.algorithm = rl_parse_algorithm(PG_GETARG_TEXT_PP(1));
	limiter.limit = PG_GETARG_INT64(2);
	limiter.window_us = rl_window_us(PG_GETARG_INTERVAL_P(3));
	limiter.burst = rl_burst_arg(fcinfo, burstarg);
	rl_check_limiter(&limiter);
	rl_check_cost(cost, &limiter);

	rl_engine_check_keys(&limiter, &key, &keylen, &cost, 1, &answer);
	return HeapTupleGetDatum(rl_answer_tuple(rl_result_desc(fcinfo), &answer));
}

/*
 * rl_allow(key, algo, limit, window, cost DEFAULT 1, burst DEFAULT NULL)
 *	 RETURNS rl_result
 *
 * Asks for cost units of key's limiter; a denied call consumes nothing.
 */
Datum
rl_allow(PG_FUNCTION_ARGS)
{
	rl_require_args(fcinfo, 5);
	return rl_allow_internal(fcinfo, PG_GETARG_INT64(4), 5);
}

/* rl_peek(key, algo, limit, window, burst DEFAULT NULL): cost 0. */
Datum
rl_peek(PG_FUNCTION_ARGS)
{
	rl_require_args(fcinfo, 4);
	return rl_allow_internal(fcinfo, 0, 4);
}

/*
 * rl_reset(key, algo, limit, window, burst DEFAULT NULL) RETURNS boolean:
 * forgets a limiter's state.  The parameters name the limiter, as they do
 * in rl_allow (rl_redis_key).  The definitions before 0.4.0 have only key
 * and algo, which no longer name one limiter.
 */
Datum
rl_reset(PG_FUNCTION_ARGS)
{
	RlLimiter	limiter = {0};
	char	   *key;
	int			keylen;

	if (PG_NARGS() < 4)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("rl_reset(key, algo) needs the limiter's limit and window since ratelimit 0.4.0"),
				 errdetail("A limiter is its key, algorithm, limit, window and burst."),
				 errhint("Run ALTER EXTENSION ratelimit UPDATE, then call rl_reset(key, algo, limit, window).")));
	rl_require_args(fcinfo, 4);
	key = rl_check_key(PG_GETARG_TEXT_PP(0), &keylen);
	limiter.algorithm = rl_parse_algorithm(PG_GETARG_TEXT_PP(1));
	limiter.limit = PG_GETARG_INT64(2);
	limiter.window_us = rl_window_us(PG_GETARG_INTERVAL_P(3));
	limiter.burst = rl_burst_arg(fcinfo, 4);
	rl_check_limiter(&limiter);
	key = rl_redis_key(key, keylen, &limiter);
	PG_RETURN_BOOL(rl_engine_reset(&key, &limiter, 1));
}

/*
 * Shared by rl_allow and rl_peek by policy name: the policy's limiter
 * (rl_policies.c), then the check the parameter forms make.
 */
static Datum
rl_allow_policy_internal(FunctionCallInfo fcinfo, int64 cost)
{
	RlLimiter	limiter;
	RlAnswer	answer;
	char	   *key;
	int			keylen;

	key = rl_check_key(PG_GETARG_TEXT_PP(0), &keylen);
	rl_policy_get_text(PG_GETARG_TEXT_PP(1), &limiter);
	rl_check_cost(cost, &limiter);

	rl_engine_check_keys(&limiter, &key, &keylen, &cost, 1, &answer);
	return HeapTupleGetDatum(rl_answer_tuple(rl_result_desc(fcinfo), &answer));
}

/* rl_allow(key, policy, cost DEFAULT 1) RETURNS rl_result */
Datum
rl_allow_policy(PG_FUNCTION_ARGS)
{
	rl_require_args(fcinfo, 3);
	return rl_allow_policy_internal(fcinfo, PG_GETARG_INT64(2));
}

/* rl_peek(key, policy) RETURNS rl_result: cost 0. */
Datum
rl_peek_policy(PG_FUNCTION_ARGS)
{
	rl_require_args(fcinfo, 2);
	return rl_allow_policy_internal(fcinfo, 0);
}

/*
 * rl_reset(key, policy) RETURNS boolean: forgets the key's state under
 * the policy, whatever its parameters (they do not name its limiter).
 */
Datum
rl_reset_policy(PG_FUNCTION_ARGS)
{
	RlLimiter	limiter;
	char	   *key;
	int			keylen;

	rl_require_args(fcinfo, 2);
	key = rl_check_key(PG_GETARG_TEXT_PP(0), &keylen);
	rl_policy_get_text(PG_GETARG_TEXT_PP(1), &limiter);
	key = rl_redis_key(key, keylen, &limiter);
	PG_RETURN_BOOL(rl_engine_reset(&key, &limiter, 1));
}

/*
 * rl_status(): this backend's view of Redis and its counters.  No
 * credentials: the endpoint is host:port (or the socket) and database.
 * Columns were only ever added at the end (0.3.0: redirects and
 * map_refreshes), so the caller's row type says how many to fill: the
 * 0.1.0 and 0.2.0 definitions get their fourteen.
 */
Datum
rl_status(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[16];
	bool		nulls[16] = {0};
	const char *endpoint;
	bool		connected;
	const char *version;
	const char *error;
	TimestampTz error_at;
	int			i = 0;
	RlCounters	mine;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (desc->natts > lengthof(values))
		elog(ERROR, "rl_status has %d columns, at most %d expected",
			 desc->natts, (int) lengthof(values));
	desc = BlessTupleDesc(desc);
	rl_stats_backend_counters(&mine);
	rl_engine_status(&endpoint, &connected, &version, &error, &error_at);

	values[i++] = CStringGetTextDatum(endpoint);
	values[i++] = BoolGetDatum(connected);
	nulls[i] = version == NULL;
	values[i++] = version ? CStringGetTextDatum(version) : (Datum) 0;
	nulls[i] = error == NULL;
	values[i++] = error ? CStringGetTextDatum(error) : (Datum) 0;
	nulls[i] = error == NULL;
	values[i++] = TimestampTzGetDatum(error_at);
	values[i++] = Int64GetDatum(mine.calls);
	values[i++] = Int64GetDatum(mine.allowed);
	values[i++] = Int64GetDatum(mine.denied);
	values[i++] = Int64GetDatum(mine.fail_open);
	values[i++] = Int64GetDatum(mine.fail_closed);
	values[i++] = Int64GetDatum(mine.failures);
	values[i++] = Int64GetDatum(mine.connects);
	values[i++] = Int64GetDatum(mine.script_loads);
	values[i++] = Int64GetDatum(mine.cached);
	values[i++] = Int64GetDatum(mine.redirects);
	values[i++] = Int64GetDatum(mine.map_refreshes);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}

/*
 * rl_ping() RETURNS SETOF (engine, mode, endpoint, server, version,
 * rtt_ms): the installation's verification step and a monitor's check.
 * Unlike rl_status(), which shows what this backend saw so far, it
 * connects now and has each server answer (standalone: the server;
 * Sentinel: the master they name; Cluster: every master of the slot map),
 * and an ERROR says which one cannot be used and why, whatever
 * ratelimit.failure_mode (rl_engine_probe).  On the local engine one row
 * says so.  Granted to pg_monitor; no secret in a row or a message.
 */
Datum
rl_ping(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	RlProbeRow *rows = palloc0(sizeof(RlProbeRow) * RL_MAX_NODES);
	int			n;

	n = rl_engine_probe(rows, RL_MAX_NODES);
	InitMaterializedSRF(fcinfo, 0);
	for (int i = 0; i < n; i++)
	{
		RlProbeRow *row = &rows[i];
		Datum		values[6];
		bool		nulls[6] = {0};

		values[0] = CStringGetTextDatum(row->engine);
		nulls[1] = row->mode == NULL;
		values[1] = row->mode ? CStringGetTextDatum(row->mode) : (Datum) 0;
		nulls[2] = row->endpoint[0] == '\0';
		values[2] = CStringGetTextDatum(row->endpoint);
		nulls[3] = row->server[0] == '\0';
		values[3] = CStringGetTextDatum(row->server);
		nulls[4] = row->version[0] == '\0';
		values[4] = CStringGetTextDatum(row->version);
		nulls[5] = row->rtt_ms < 0;
		values[5] = Float8GetDatum(row->rtt_ms);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	pfree(rows);
	return (Datum) 0;
}
