/*-------------------------------------------------------------------------
 *
 * ratelimit.c
 *	  Entry points: rl_allow, rl_peek, rl_reset and rl_status.
 *
 * A check is one EVALSHA of the algorithm's script on the backend's Redis
 * connection; Redis runs it atomically with its own clock, so any number
 * of sessions, on any number of PostgreSQL servers, share one exact
 * limiter.
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
#include "utils/typcache.h"

#include "rl_cache.h"
#include "rl_local.h"
#include "rl_scripts.h"
#include "rl_stats.h"
#include "rl_trigger.h"

PG_MODULE_MAGIC;

bool		rl_preloaded = false;

PGDLLEXPORT void _PG_init(void);

PG_FUNCTION_INFO_V1(rl_allow);
PG_FUNCTION_INFO_V1(rl_peek);
PG_FUNCTION_INFO_V1(rl_reset);
PG_FUNCTION_INFO_V1(rl_status);

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

		rl_local_init();
		rl_trigger_hooks_init();
	}
}

/*
 * Shadow mode (ratelimit.enforce off): the checks ran and were counted as
 * usual, denials included, but every caller is let through.  A denied
 * answer becomes an admitted one with nothing to wait for; remaining and
 * reset_after_ms stay Redis's, so they still tell how close the key is.
 */
void
rl_apply_enforce(RlAnswer *answers, int n)
{
	if (rl_enforce)
		return;
	for (int i = 0; i < n; i++)
	{
		if (!answers[i].allowed)
		{
			rl_counters.shadow_denied++;
			answers[i].allowed = true;
			answers[i].retry_after_ms = 0;
		}
	}
}

static void rl_check_many_once(const RlLimiter *limiter, char **keys,
							   int *keylens, const int64 *costs, int n,
							   RlAnswer *answers);

/*
 * Checks n keys against one limiter in a single round trip.  Keys the
 * deny cache answers (rl_cache.c) are left out of it; while Redis is
 * unavailable every other answer is the failure policy's.
 */
void
rl_check_many(const RlLimiter *limiter, char **keys, int *keylens,
			  const int64 *costs, int n, RlAnswer *answers)
{
	rl_check_many_once(limiter, keys, keylens, costs, n, answers);
	rl_apply_enforce(answers, n);
}

/*
 * rl_check_many on the local engine: each key answered at once, with
 * nothing built for Redis (no script call, no reply).
 */
static void
rl_check_many_local(const RlLimiter *limiter, char **keys, int *keylens,
					const int64 *costs, int n, RlAnswer *answers)
{
	/* The shared reset count is read only for a deny cache that is on. */
	uint64		epoch = rl_deny_cache ? rl_cache_epoch() : 0;

	rl_counters.calls += n;
	for (int i = 0; i < n; i++)
	{
		char	   *rkey = rl_redis_key(keys[i], keylens[i], limiter, false);

		if (rl_cache_lookup(rkey, limiter, costs[i], &answers[i]))
		{
			rl_counters.cached++;
			rl_counters.denied++;
			rl_stats_denied(rkey, limiter->algorithm);
		}
		else if (!rl_local_check(limiter, rkey, costs[i], &answers[i]))
			rl_policy_answer(&answers[i]);
		else if (answers[i].allowed)
			rl_counters.allowed++;
		else
		{
			rl_counters.denied++;
			rl_stats_denied(rkey, limiter->algorithm);
			rl_cache_remember(rkey, limiter, costs[i], &answers[i], epoch);
		}
		pfree(rkey);
	}
}

static void
rl_check_many_once(const RlLimiter *limiter, char **keys, int *keylens,
				   const int64 *costs, int n, RlAnswer *answers)
{
	RlScriptCall *calls;
	redisReply **replies;
	RlAnswer   *got;
	int		   *slot;
	char		limit[24];
	char		window[24];
	char		burst[24];
	const char *clock;
	uint64		epoch;
	int			m = 0;

	if (rl_engine == RL_ENGINE_LOCAL)
	{
		rl_check_many_local(limiter, keys, keylens, costs, n, answers);
		return;
	}
	calls = palloc(sizeof(RlScriptCall) * n);
	replies = palloc0(sizeof(redisReply *) * n);
	got = palloc(sizeof(RlAnswer) * n);
	slot = palloc(sizeof(int) * n);
	clock = rl_clock_arg();
	epoch = rl_cache_epoch();
	snprintf(limit, sizeof(limit), INT64_FORMAT, limiter->limit);
	snprintf(window, sizeof(window), INT64_FORMAT, limiter->window_us);
	snprintf(burst, sizeof(burst), INT64_FORMAT, limiter->burst);
	rl_counters.calls += n;
	for (int i = 0; i < n; i++)
	{
		char	   *rkey = rl_redis_key(keys[i], keylens[i], limiter, false);
		RlScriptCall *call = &calls[m];

		if (rl_cache_lookup(rkey, limiter, costs[i], &answers[i]))
		{
			rl_counters.cached++;
			rl_counters.denied++;
			rl_stats_denied(rkey, limiter->algorithm);
			continue;
		}
		/* A burst is a sixth argument, sent only when one is set. */
		rl_script_call_init(call, limiter->algorithm, 1,
							limiter->burst > 0 ? 6 : 5);
		rl_script_call_set(call, 0, rkey);
		rl_script_call_set(call, 1, limit);
		rl_script_call_set(call, 2, window);
		rl_script_call_set(call, 3, psprintf(INT64_FORMAT, costs[i]));
		rl_script_call_set(call, 4, clock);
		if (limiter->burst > 0)
			rl_script_call_set(call, 5, burst);
		slot[m++] = i;
	}
	if (m == 0)
		return;

	if (!rl_run_scripts(calls, m, replies))
	{
		for (int j = 0; j < m; j++)
			rl_policy_answer_for(j, m, &answers[slot[j]]);
		return;
	}
	rl_take_answers(replies, m, got);
	for (int j = 0; j < m; j++)
	{
		int			i = slot[j];

		answers[i] = got[j];
		if (!got[j].known)
			continue;			/* the policy's answer, counted there */
		if (got[j].allowed)
			rl_counters.allowed++;
		else
		{
			rl_counters.denied++;
			rl_stats_denied(calls[j].params[0], limiter->algorithm);
			rl_cache_remember(calls[j].params[0], limiter, costs[i], &got[j],
							  epoch);
		}
	}
}

/*
 * The rl_result row.  remaining and reset_after_ms are NULL when Redis did
 * not answer: the policy knows neither.
 */
HeapTuple
rl_answer_tuple(TupleDesc desc, const RlAnswer *answer)
{
	Datum		values[4];
	bool		nulls[4] = {false, !answer->known, false, !answer->known};

	values[0] = BoolGetDatum(answer->allowed);
	values[1] = Int64GetDatum(answer->remaining);
	values[2] = Int64GetDatum(answer->retry_after_ms);
	values[3] = Int64GetDatum(answer->reset_after_ms);
	return heap_form_tuple(desc, values, nulls);
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
	RlLimiter	limiter;
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

	rl_check_many(&limiter, &key, &keylen, &cost, 1, &answer);
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
 * Deletes limiter keys in one DEL; true if any existed.  Administrative,
 * so an unavailable Redis is an ERROR whatever the failure policy says.
 * Every backend's cached denials are dropped, whatever the outcome.
 */
bool
rl_delete_keys(char **keys, int n)
{
	const char **argv = palloc(sizeof(char *) * (n + 1));
	size_t	   *argvlen = palloc(sizeof(size_t) * (n + 1));
	RlCommand	cmd = {n + 1, argv, argvlen};
	redisReply *reply;
	bool		existed;
	bool		sent = false;
	TimestampTz at;

	argv[0] = "DEL";
	argvlen[0] = 3;
	for (int i = 0; i < n; i++)
	{
		argv[i + 1] = keys[i];
		argvlen[i + 1] = strlen(keys[i]);
	}
	PG_TRY();
	{
		sent = rl_run_command(&cmd, &reply);
	}
	PG_FINALLY();
	{
		rl_cache_invalidate();
	}
	PG_END_TRY();
	if (!sent)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("Redis server %s is unavailable", rl_conn_endpoint()),
				 errdetail_internal("%s", rl_conn_last_error(&at))));
	if (reply->type != REDIS_REPLY_INTEGER)
	{
		/* DEL answers a count; anything else is a peer out of step. */
		freeReplyObject(reply);
		rl_conn_drop();
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("unexpected reply from Redis to DEL"),
				 errdetail("The connection to Redis was closed; the next call opens a new one.")));
	}
	existed = reply->integer > 0;
	freeReplyObject(reply);
	return existed;
}

/* rl_reset(key, algo) RETURNS boolean: forgets a limiter's state. */
Datum
rl_reset(PG_FUNCTION_ARGS)
{
	RlLimiter	limiter = {0};
	char	   *key;
	int			keylen;

	rl_require_args(fcinfo, 2);
	key = rl_check_key(PG_GETARG_TEXT_PP(0), &keylen);
	limiter.algorithm = rl_parse_algorithm(PG_GETARG_TEXT_PP(1));
	key = rl_redis_key(key, keylen, &limiter, false);
	PG_RETURN_BOOL(rl_delete_keys(&key, 1));
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
	const char *version = rl_conn_server_version();
	TimestampTz error_at;
	const char *error = rl_conn_last_error(&error_at);
	int			i = 0;
	RlCounters	mine;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	if (desc->natts > lengthof(values))
		elog(ERROR, "rl_status has %d columns, at most %d expected",
			 desc->natts, (int) lengthof(values));
	desc = BlessTupleDesc(desc);
	rl_stats_backend_counters(&mine);

	values[i++] = CStringGetTextDatum(rl_conn_status_endpoint());
	values[i++] = BoolGetDatum(rl_conn_connected());
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
