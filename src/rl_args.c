/*-------------------------------------------------------------------------
 *
 * rl_args.c
 *	  Argument checks and Redis key names.
 *
 * Everything a caller passes is checked here, before any Redis round
 * trip, so bad input costs nothing and leaves the connection as it was.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_args.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <math.h>

#include "funcapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "rl_args.h"

/*
 * The algorithms' names, with their lengths, so that parsing compares a
 * name only when its length fits.
 */
#define RL_ALGORITHM(name)	{name, sizeof(name) - 1}
static const struct
{
	const char *name;
	int			len;
}			rl_algorithms[RL_NUM_ALGORITHMS] = {
	RL_ALGORITHM("fixed_window"),
	RL_ALGORITHM("sliding_log"),
	RL_ALGORITHM("sliding_counter"),
	RL_ALGORITHM("token_bucket"),
	RL_ALGORITHM("leaky_bucket"),
	RL_ALGORITHM("gcra"),
	RL_ALGORITHM("concurrency")
};

/*
 * The name of argument i of a function ("limit"), as the user wrote it in
 * the call; only an error path asks, so the catalog lookup costs nothing
 * on the way of a check.
 */
static const char *
rl_arg_name(Oid fn_oid, int i)
{
	HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn_oid));
	Oid		   *types;
	char	  **names = NULL;
	char	   *modes;
	int			n;
	const char *name = NULL;

	if (!HeapTupleIsValid(tuple))
		return "?";
	n = get_func_arg_info(tuple, &types, &names, &modes);
	if (names != NULL && i < n && names[i] != NULL && names[i][0] != '\0')
		name = pstrdup(names[i]);
	ReleaseSysCache(tuple);
	return name != NULL ? name : psprintf("%d", i + 1);
}

/*
 * A NULL argument is an error, never a NULL answer: a NULL rl_result would
 * make "IF NOT (rl_allow(...)).allowed" skip its branch and fail open.
 */
void
rl_require_args(FunctionCallInfo fcinfo, int nargs)
{
	for (int i = 0; i < nargs; i++)
	{
		if (PG_ARGISNULL(i))
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("argument \"%s\" of %s must not be null",
							rl_arg_name(fcinfo->flinfo->fn_oid, i),
							get_func_name(fcinfo->flinfo->fn_oid))));
	}
}

/*
 * Spelling is exact: a near miss is an error, not a silent default.  The
 * text is compared in place (no copy made on every call); only the error
 * message copies it.
 */
RlAlgorithm
rl_parse_algorithm(text *algo)
{
	const char *data = VARDATA_ANY(algo);
	size_t		len = VARSIZE_ANY_EXHDR(algo);
	char	   *name;

	for (int i = 0; i < RL_NUM_ALGORITHMS; i++)
	{
		if (rl_algorithms[i].len == len &&
			memcmp(data, rl_algorithms[i].name, len) == 0)
			return (RlAlgorithm) i;
	}
	name = text_to_cstring(algo);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown rate limiting algorithm \"%s\"", name),
			 errhint("Valid algorithms are fixed_window, sliding_log, sliding_counter, token_bucket, leaky_bucket, gcra and concurrency.")));
	pg_unreachable();
}

const char *
rl_algorithm_name(RlAlgorithm algorithm)
{
	return rl_algorithms[algorithm].name;
}

/*
 * Converts a window to microseconds.  A month counts as 30 days, as
 * PostgreSQL's own interval arithmetic does; the sum is done in floating
 * point first so that huge intervals are rejected instead of wrapping.
 */
int64
rl_window_us(Interval *window)
{
	double		us;

	us = (double) window->month * DAYS_PER_MONTH * USECS_PER_DAY +
		(double) window->day * USECS_PER_DAY +
		(double) window->time;

	if (us < RL_MIN_WINDOW_US)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rate limit window must be at least 1 millisecond")));
	if (us > RL_MAX_WINDOW_US)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rate limit window must be at most 366 days")));

	return (int64) us;
}

/*
 * Limits a limiter can keep: at least one unit, and no more than its cap.
 * A burst is the capacity of the buckets and GCRA, apart from their rate;
 * the window algorithms count calls per window and have no capacity of
 * their own, so a burst there would be a number that changes nothing.
 */
void
rl_check_limiter(const RlLimiter *limiter)
{
	int64		cap = rl_algorithm_logs(limiter->algorithm) ?
		RL_MAX_LOG_LIMIT : RL_MAX_LIMIT;
	bool		gradual = limiter->algorithm == RL_TOKEN_BUCKET ||
		limiter->algorithm == RL_LEAKY_BUCKET ||
		limiter->algorithm == RL_GCRA;

	if (limiter->limit < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rate limit must be at least 1")));
	if (limiter->limit > cap)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rate limit must be at most " INT64_FORMAT " for %s",
						cap, rl_algorithm_name(limiter->algorithm)),
				 limiter->algorithm == RL_SLIDING_LOG ?
				 errdetail("The sliding log stores one entry per admitted call, up to the limit per window.") :
				 limiter->algorithm == RL_CONCURRENCY ?
				 errdetail("A concurrency limit stores one entry per holder, up to the limit.") : 0));

	if (limiter->burst != 0 && !gradual)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("burst applies only to token_bucket, leaky_bucket and gcra, not to %s",
						rl_algorithm_name(limiter->algorithm)),
				 errdetail("A window algorithm admits limit calls per window; it has no capacity apart from its limit."),
				 errhint("Leave burst null, or use token_bucket, leaky_bucket or gcra.")));
	if (limiter->burst > RL_MAX_LIMIT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("burst must be at most " INT64_FORMAT, RL_MAX_LIMIT)));

	/*
	 * The buckets and GCRA count in steps of window / gcd(limit, window)
	 * microseconds; their scripts are exact while the capacity (limit, or
	 * the burst) times that step fits a double's 53-bit mantissa.  Round
	 * numbers always fit (10^9 per day does); a prime limit over a long,
	 * odd window may not.
	 */
	if (gradual)
	{
		int64		a = limiter->limit;
		int64		b = limiter->window_us;
		int64		most = Max(limiter->limit, rl_capacity(limiter));

		while (b != 0)
		{
			int64		t = a % b;

			a = b;
			b = t;
		}
		if (most > (INT64CONST(1) << 53) / (limiter->window_us / a))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("rate limit " INT64_FORMAT " per " INT64_FORMAT " microseconds is too fine for %s",
							limiter->limit, limiter->window_us,
							rl_algorithm_name(limiter->algorithm)),
					 limiter->burst > limiter->limit ?
					 errdetail("burst x window / gcd(limit, window in microseconds) must stay below 2^53 for exact arithmetic.") :
					 errdetail("limit x window / gcd(limit, window in microseconds) must stay below 2^53 for exact arithmetic."),
					 errhint("Round the limit or the window, for example to whole seconds.")));
	}
}

/*
 * The optional burst argument argno: 0 (none) when the function has no
 * such argument (a 0.1.0 or 0.2.0 definition) or it is NULL.  0 itself is
 * no capacity at all, so only 1 and more are bursts.
 */
int64
rl_burst_arg(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return 0;
	return rl_check_burst(PG_GETARG_INT64(argno));
}

/* A burst given (not NULL) must hold at least one unit. */
int64
rl_check_burst(int64 burst)
{
	if (burst < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("burst must be at least 1"),
				 errhint("Leave burst null for a capacity equal to the limit.")));
	return burst;
}

/*
 * A cost above the capacity could never pass; saying so beats denying
 * forever.  The capacity is the limit, or the burst where one is set.
 */
void
rl_check_cost(int64 cost, const RlLimiter *limiter)
{
	if (cost < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost must not be negative")));
	if (limiter->burst > 0 && cost > limiter->burst)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost " INT64_FORMAT " exceeds the burst " INT64_FORMAT,
						cost, limiter->burst),
				 errdetail("A call that costs more than the burst can never be allowed.")));
	if (limiter->burst == 0 && cost > limiter->limit)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cost " INT64_FORMAT " exceeds the limit " INT64_FORMAT,
						cost, limiter->limit),
				 errdetail("A call that costs more than the limit can never be allowed.")));
}

/*
 * A policy's name goes into store keys and trigger arguments, so it is
 * kept to letters, digits and "_.:-": nothing to escape, no "/" (the
 * policy key's separator), no "=" or "," (a trigger's argument).
 */
bool
rl_policy_name_ok(const char *name, int len)
{
	if (len < 1 || len > RL_MAX_POLICY_NAME)
		return false;
	for (int i = 0; i < len; i++)
	{
		char		c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '_' || c == '.' || c == ':' ||
			  c == '-'))
			return false;
	}
	return true;
}

/* A policy's name as rl_policies takes it: an ERROR when it breaks the rule. */
void
rl_check_policy_name(const char *name, int len)
{
	if (!rl_policy_name_ok(name, len))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid rate limit policy name \"%s%s\"",
						pnstrdup(name, pg_mbcliplen(name, len,
													Min(len, RL_MAX_POLICY_NAME + 1))),
						len > RL_MAX_POLICY_NAME + 1 ? "..." : ""),
				 errdetail("A policy name is 1 to %d bytes of letters, digits, \"_\", \".\", \":\" and \"-\".",
						   RL_MAX_POLICY_NAME)));
}

/*
 * A policy's failure_mode, spelled as ratelimit.failure_mode's values;
 * returns the RlFailureMode.
 */
int
rl_parse_failure_mode(const char *mode)
{
	static const char *const modes[] = {"open", "closed", "error", "local"};

	StaticAssertStmt(RL_FAIL_OPEN == 0 && RL_FAIL_CLOSED == 1 &&
					 RL_FAIL_ERROR == 2 && RL_FAIL_LOCAL == 3,
					 "failure modes out of order");
	for (int i = 0; i < lengthof(modes); i++)
	{
		if (strcmp(mode, modes[i]) == 0)
			return i;
	}
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid failure_mode \"%s\"", mode),
			 errhint("Valid failure modes are open, closed, error and local, or null for ratelimit.failure_mode.")));
	pg_unreachable();
}

/* Returns the key's bytes after checking its length. */
char *
rl_check_key(text *key, int *len)
{
	*len = VARSIZE_ANY_EXHDR(key);
	if (*len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rate limit key must not be empty")));
	if (*len > RL_MAX_KEY_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("rate limit key must be at most %d bytes", RL_MAX_KEY_BYTES),
				 errhint("Hash long keys, for example with md5(), before passing them.")));
	return VARDATA_ANY(key);
}

/*
 * Writes "<prefix>{<database>:<escaped key>}" at out (sized by the caller:
 * rl_key_tag_size) and returns the end; prefixlen is rl_key_prefix's.
 * Written with memcpy, the prefix measured once: every call builds at
 * least one key, and a statement trigger builds a thousand.
 */
static char *
rl_key_tag(char *p, const char *key, int keylen, int prefixlen)
{
	memcpy(p, rl_key_prefix, prefixlen);
	p += prefixlen;
	*p++ = '{';
	if (rl_isolate_databases)
		p += pg_ultoa_n(MyDatabaseId, p);
	else
	{
		memcpy(p, "all", 3);
		p += 3;
	}
	*p++ = ':';
	for (int i = 0; i < keylen; i++)
	{
		if (key[i] == '%')
		{
			memcpy(p, "%25", 3);
			p += 3;
		}
		else if (key[i] == '}')
		{
			memcpy(p, "%7D", 3);
			p += 3;
		}
		else
			*p++ = key[i];
	}
	*p++ = '}';
	return p;
}

/*
 * The bytes rl_key_tag writes, at most: every key byte escaped, the
 * database OID at its longest, the braces and the colon.  A bound rather
 * than a count, so the key is read once, when it is written.
 */
static inline int
rl_key_tag_size(int keylen, int prefixlen)
{
	return prefixlen + 1 + 10 + 1 + 3 * keylen + 1;
}

/*
 * The store key of a named policy's limiter (0.5.0):
 *
 *		<prefix>{<database oid>:<escaped key>}:policy:<name>/<algorithm>
 *
 * The key's tag is the parameter forms' (rl_redis_key), so a layered
 * check mixing both stays in one hash slot.  What follows the tag names
 * the policy and its algorithm, never the limit, window or burst, so a
 * change of those keeps the state (the store carries it over: RlLimiter.
 * carry); a change of algorithm starts afresh under another key.  It
 * cannot spell a parameter form's key, whose part after the tag starts
 * with an algorithm's name, and "/" is in no policy's name, so no two
 * policies (or suffixes a store adds) share one.
 */
static char *
rl_policy_key(const char *key, int keylen, const char *policy,
			  RlAlgorithm algorithm)
{
	const char *algoname = rl_algorithm_name(algorithm);
	int			algolen = strlen(algoname);
	int			namelen = strlen(policy);
	int			prefixlen = strlen(rl_key_prefix);
	char	   *out;
	char	   *p;

	out = palloc(rl_key_tag_size(keylen, prefixlen) + 10 + namelen + algolen + 2);
	p = rl_key_tag(out, key, keylen, prefixlen);
	memcpy(p, ":policy:", 8);
	p += 8;
	memcpy(p, policy, namelen);
	p += namelen;
	*p++ = '/';
	memcpy(p, algoname, algolen);
	p += algolen;
	*p = '\0';
	return out;
}

/*
 * The Redis key of a limiter:
 *
 *		<prefix>{<database oid>:<escaped key>}:<algorithm>:<limit>:<window>[:b<burst>]
 *
 * with the window in ms ("60000ms"), or in us when it is not a whole
 * number of ms ("1500us"), and a burst only when it is not the limit (a
 * burst equal to the limit is the capacity no burst gives: one limiter).
 *
 * Everything a limiter stores lives under one {hash tag}, so a Redis
 * Cluster keeps it on one node.  The user key is escaped ("%" becomes
 * "%25", "}" becomes "%7D") so it cannot close the tag early, and the
 * database OID (or "all" when databases share limiters) comes first, so
 * no key of one database can spell a key of another.
 *
 * The parameters are part of the name: a limiter is its key, algorithm,
 * limit, window and burst.  A call reads and rewrites the state under its
 * own parameters, so were they not, one call of other parameters (a limit
 * of a billion per millisecond) would undo another caller's count, and
 * anyone allowed to call for a key could reset it.  A change of limit or
 * window starts a new limiter; the old one's key expires on its own.
 *
 * Written into buf (size bytes) when it fits there, else palloc'd: a
 * single check keeps its key on the stack (rl_engine_check_keys).
 */
char *
rl_redis_key_in(char *buf, int size, const char *key, int keylen,
				const RlLimiter *limiter)
{
	const char *algorithm = rl_algorithm_name(limiter->algorithm);
	int			algolen = strlen(algorithm);
	int			prefixlen;
	int			need;
	char	   *out;
	char	   *p;

	if (limiter->name != NULL)
		return rl_policy_key(key, keylen, limiter->name, limiter->algorithm);
	prefixlen = strlen(rl_key_prefix);
	need = rl_key_tag_size(keylen, prefixlen) + algolen + 64;
	out = need <= size ? buf : palloc(need);
	p = rl_key_tag(out, key, keylen, prefixlen);
	*p++ = ':';
	memcpy(p, algorithm, algolen);
	p += algolen;
	*p++ = ':';
	p += pg_lltoa(limiter->limit, p);
	*p++ = ':';
	if (limiter->window_us % 1000 == 0)
	{
		p += pg_lltoa(limiter->window_us / 1000, p);
		*p++ = 'm';
	}
	else
	{
		p += pg_lltoa(limiter->window_us, p);
		*p++ = 'u';
	}
	*p++ = 's';
	if (limiter->burst > 0 && limiter->burst != limiter->limit)
	{
		*p++ = ':';
		*p++ = 'b';
		p += pg_lltoa(limiter->burst, p);
	}
	*p = '\0';
	return out;
}

/* rl_redis_key_in, always palloc'd. */
char *
rl_redis_key(const char *key, int keylen, const RlLimiter *limiter)
{
	return rl_redis_key_in(NULL, 0, key, keylen, limiter);
}

/* The clock argument of every script: pinned microseconds, or 0 for TIME. */
const char *
rl_clock_arg(void)
{
	static char buf[32];

	if (rl_test_clock_ms <= 0)
		return "0";
	snprintf(buf, sizeof(buf), "%.0f", rint(rl_test_clock_ms * 1000.0));
	return buf;
}

/*
 * Unpacks a one-dimensional array argument, rejecting NULL elements: a
 * NULL key, cost or rule has no answer, and skipping it would shift every
 * later answer against its element.
 */
Datum *
rl_array_elements(ArrayType *arr, const char *what, int *n)
{
	Oid			elemtype = ARR_ELEMTYPE(arr);
	int16		typlen;
	bool		typbyval;
	char		typalign;
	Datum	   *elems;
	bool	   *nulls;

	if (ARR_NDIM(arr) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_ARRAY_SUBSCRIPT_ERROR),
				 errmsg("%s must be a one-dimensional array", what)));
	get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
	deconstruct_array(arr, elemtype, typlen, typbyval, typalign,
					  &elems, &nulls, n);
	for (int i = 0; i < *n; i++)
	{
		if (nulls[i])
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("element %d of %s must not be null", i + 1, what)));
	}
	return elems;
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
