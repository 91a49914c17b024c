/*-------------------------------------------------------------------------
 *
 * rl_postgrest.c
 *	  rl_postgrest_guard and the answers PostgREST turns into HTTP.
 *
 * PostgREST runs each request in one transaction: it sets the request's
 * JWT claims and headers as transaction-local settings, switches to the
 * caller's role, and calls the db-pre-request function, if configured,
 * before the request itself.  rl_postgrest_guard is meant to be called
 * from there.  It keys the limiter by the JWT's "sub" claim, else the
 * X-Forwarded-For address the outermost trusted proxy wrote (the entry
 * ratelimit.trusted_proxy_hops places from the right), else the client
 * address, and on denial raises the one error form that lets PostgREST
 * set the status and the headers:
 *
 *		SQLSTATE 'PGRST', MESSAGE = {"code", "message", "details", "hint"}
 *						  DETAIL  = {"status": 429, "headers": {...}}
 *
 * where every header value must be a JSON string.  Settings made with
 * set_config() are lost when the transaction fails, so the 429's headers
 * can only travel in the error itself; on success the RateLimit fields
 * are added to response.headers.  Nothing here writes to the database,
 * so it works in the READ ONLY transactions PostgREST uses for GET.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_postgrest.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "rl_args.h"
#include "rl_engine.h"
#include "rl_policies.h"
#include "rl_postgrest.h"

PG_FUNCTION_INFO_V1(rl_postgrest_guard);
PG_FUNCTION_INFO_V1(rl_postgrest_guard_policy);

static Datum rl_postgrest_guard_run(FunctionCallInfo fcinfo,
									const RlLimiter *limiter, int keyarg);

/*
 * PostgREST leaves its request settings as '' (not unset) once a request
 * ends, and the pooled connection serves the next one: '' means absent.
 */
static const char *
rl_request_setting(const char *name)
{
	const char *value = GetConfigOption(name, true, false);

	if (value == NULL || value[0] == '\0')
		return NULL;
	return value;
}

/* True while serving a PostgREST request: its settings are present. */
bool
rl_in_postgrest_request(void)
{
	return rl_request_setting("request.method") != NULL ||
		rl_request_setting("request.jwt.claims") != NULL;
}

/*
 * A window in words, for messages: "1 minute", "90 seconds", "250
 * milliseconds".  The largest unit that divides it exactly is used.
 */
char *
rl_window_text(int64 window_us)
{
	static const struct
	{
		int64		us;
		const char *one;
		const char *many;
	}			units[] = {
		{USECS_PER_DAY, "day", "days"},
		{USECS_PER_HOUR, "hour", "hours"},
		{USECS_PER_MINUTE, "minute", "minutes"},
		{USECS_PER_SEC, "second", "seconds"},
		{1000, "millisecond", "milliseconds"},
		{1, "microsecond", "microseconds"}
	};

	for (int i = 0; i < lengthof(units); i++)
	{
		if (window_us % units[i].us == 0)
		{
			int64		count = window_us / units[i].us;

			return psprintf(INT64_FORMAT " %s", count,
							count == 1 ? units[i].one : units[i].many);
		}
	}
	pg_unreachable();
}

/* Milliseconds to whole seconds, rounded up. */
static int64
rl_seconds_up(int64 ms)
{
	return ms <= 0 ? 0 : (ms + 999) / 1000;
}

/* ,"name":"value" (or without the comma for the first member) */
static void
rl_json_member(StringInfo buf, bool first, const char *name, const char *value)
{
	if (!first)
		appendStringInfoChar(buf, ',');
	escape_json(buf, name);
	appendStringInfoChar(buf, ':');
	escape_json(buf, value);
}

/*
 * The name of the quota in the RateLimit fields: a named policy's name
 * (letters, digits and "_.:-", nothing to escape), else "default".
 */
static const char *
rl_quota_name(const RlLimiter *limiter)
{
	return limiter->name != NULL ? limiter->name : "default";
}

/* The IETF RateLimit-Policy field: quota q per w seconds (rounded up). */
static char *
rl_policy_field(const RlLimiter *limiter)
{
	return psprintf("\"%s\";q=" INT64_FORMAT ";w=" INT64_FORMAT,
					rl_quota_name(limiter), limiter->limit,
					rl_seconds_up((limiter->window_us + 999) / 1000));
}

/*
 * Raises a denial the way PostgREST wants it: SQLSTATE PGRST, a MESSAGE
 * that becomes the response body and a DETAIL that sets status 429 and
 * the headers.  Retry-After is whole seconds, rounded up and at least 1,
 * since "0" would invite an immediate retry that is still refused.  The
 * RateLimit field is left out when Redis did not answer (policy denial):
 * the quota's state is then unknown.
 */
void
rl_raise_postgrest(const char *message, const char *details, const char *hint,
				   const RlAnswer *answer, const RlLimiter *limiter)
{
	StringInfoData msg;
	StringInfoData detail;
	char	   *retry;

	retry = psprintf(INT64_FORMAT,
					 Max(1, rl_seconds_up(answer->retry_after_ms)));

	initStringInfo(&msg);
	appendStringInfoChar(&msg, '{');
	rl_json_member(&msg, true, "code", "PT429");
	rl_json_member(&msg, false, "message", message);
	if (details != NULL)
		rl_json_member(&msg, false, "details", details);
	if (hint != NULL)
		rl_json_member(&msg, false, "hint", hint);
	appendStringInfoChar(&msg, '}');

	initStringInfo(&detail);
	appendStringInfoString(&detail, "{\"status\":429,\"headers\":{");
	rl_json_member(&detail, true, "Retry-After", retry);
	if (answer->known)
		rl_json_member(&detail, false, "RateLimit",
					   psprintf("\"%s\";r=0;t=%s", rl_quota_name(limiter),
								retry));
	rl_json_member(&detail, false, "RateLimit-Policy", rl_policy_field(limiter));
	appendStringInfoString(&detail, "}}");

	ereport(ERROR,
			(errcode(RL_ERRCODE_POSTGREST),
			 errmsg_internal("%s", msg.data),
			 errdetail_internal("%s", detail.data)));
	pg_unreachable();
}

/*
 * Appends the RateLimit fields of an allowed request to response.headers,
 * keeping what is there.  PostgREST reads the setting as a JSON array of
 * single-key objects.  The change is transaction-local, as PostgREST's
 * own settings are.
 */
static void
rl_add_response_headers(const RlAnswer *answer, const RlLimiter *limiter)
{
	const char *current = rl_request_setting("response.headers");
	StringInfoData buf;
	Jsonb	   *have;
	Jsonb	   *add;
	Datum		merged;

	if (current == NULL)
		current = "[]";
	have = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(current)));
	if (!JB_ROOT_IS_ARRAY(have) || JB_ROOT_IS_SCALAR(have))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("response.headers must be a JSON array"),
				 errdetail("Its value is %s.", current),
				 errhint("PostgREST expects an array of single-key objects, such as [{\"Cache-Control\": \"no-cache\"}].")));

	initStringInfo(&buf);
	appendStringInfoString(&buf, "[{");
	rl_json_member(&buf, true, "RateLimit",
				   psprintf("\"%s\";r=" INT64_FORMAT ";t=" INT64_FORMAT,
							rl_quota_name(limiter),
							answer->remaining,
							rl_seconds_up(answer->reset_after_ms)));
	appendStringInfoString(&buf, "},{");
	rl_json_member(&buf, true, "RateLimit-Policy", rl_policy_field(limiter));
	appendStringInfoString(&buf, "}]");
	add = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));

	merged = DirectFunctionCall2(jsonb_concat, JsonbPGetDatum(have),
								 JsonbPGetDatum(add));
	(void) set_config_option("response.headers",
							 DatumGetCString(DirectFunctionCall1(jsonb_out, merged)),
							 superuser() ? PGC_SUSET : PGC_USERSET,
							 PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
}

/* A top-level string (or number) member of a JSON object setting. */
static char *
rl_json_setting_member(const char *setting, const char *member)
{
	const char *value = rl_request_setting(setting);
	Jsonb	   *jb;
	JsonbValue	v;

	if (value == NULL)
		return NULL;
	jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(value)));
	if (!JB_ROOT_IS_OBJECT(jb) ||
		getKeyJsonValueFromContainer(&jb->root, member, strlen(member), &v) == NULL)
		return NULL;
	if (v.type == jbvString)
		return pnstrdup(v.val.string.val, v.val.string.len);
	if (v.type == jbvNumeric)
		return DatumGetCString(DirectFunctionCall1(numeric_out,
												   NumericGetDatum(v.val.numeric)));
	return NULL;
}

/*
 * The entry of an X-Forwarded-For list "hops" places from the right, as a
 * normalized address, or NULL.  Each proxy appends the address of its
 * peer to what it received, so everything left of what the trusted
 * proxies wrote came from the client and may be anything; the entry the
 * outermost trusted proxy wrote is the caller's address.  Fewer entries
 * than hops means the request did not pass all the proxies, and nothing
 * says who wrote the left-most entry (the client itself, if it reached an
 * inner proxy directly): no answer.  The
 * entry must be an IPv4 or IPv6 address, optionally with a port
 * ("192.0.2.1:5000", "[2001:db8::1]:443"), which is dropped along with
 * brackets and spaces; it is printed back in canonical form (an
 * IPv4-mapped IPv6 address as IPv4), so one caller is one limiter however
 * a proxy spells it, and no arbitrary text ever becomes a key.
 */
static char *
rl_forwarded_address(const char *xff, int hops)
{
	const char *end;
	const char *start;
	char		entry[64];
	size_t		len;
	union
	{
		struct in6_addr v6;
		struct in_addr v4;
		unsigned char bytes[16];
	}			bin;
	char		out[INET6_ADDRSTRLEN + 4];

	if (hops <= 0)
		return NULL;

	/* Walk back over hops - 1 commas: [start, end) is the entry. */
	end = xff + strlen(xff);
	for (;;)
	{
		start = end;
		while (start > xff && start[-1] != ',')
			start--;
		if (--hops == 0)
			break;
		if (start == xff)
			return NULL;		/* fewer entries than trusted hops */
		end = start - 1;
	}

	while (start < end && (*start == ' ' || *start == '\t'))
		start++;
	while (end > start && (end[-1] == ' ' || end[-1] == '\t'))
		end--;
	len = end - start;
	if (len == 0 || len >= sizeof(entry))
		return NULL;
	memcpy(entry, start, len);
	entry[len] = '\0';

	if (entry[0] == '[')
	{
		/* [v6] or [v6]:port */
		char	   *close = strchr(entry, ']');

		if (close == NULL ||
			(close[1] != '\0' &&
			 (close[1] != ':' || close[2] == '\0' ||
			  strspn(close + 2, "0123456789") != strlen(close + 2))))
			return NULL;
		*close = '\0';
		if (inet_pton(AF_INET6, entry + 1, &bin.v6) != 1)
			return NULL;
	}
	else if (inet_pton(AF_INET6, entry, &bin.v6) != 1)
	{
		/* v4 or v4:port */
		char	   *colon = strchr(entry, ':');

		if (colon != NULL)
		{
			if (colon[1] == '\0' ||
				strspn(colon + 1, "0123456789") != strlen(colon + 1))
				return NULL;
			*colon = '\0';
		}
		if (inet_pton(AF_INET, entry, &bin.v4) != 1)
			return NULL;
		inet_ntop(AF_INET, &bin.v4, out, sizeof(out));
		return pstrdup(out);
	}

	if (IN6_IS_ADDR_V4MAPPED(&bin.v6))
	{
		inet_ntop(AF_INET, bin.bytes + 12, out, sizeof(out));
		return pstrdup(out);
	}

	/*
	 * One IPv6 caller is a prefix (ratelimit.ipv6_prefix, a /64 by
	 * default): the bits past it are the client's to choose.
	 */
	if (rl_ipv6_prefix < 128)
	{
		for (int bit = rl_ipv6_prefix; bit < 128; bit++)
			bin.bytes[bit / 8] &= ~(0x80 >> (bit % 8));
		inet_ntop(AF_INET6, &bin.v6, out, INET6_ADDRSTRLEN);
		snprintf(out + strlen(out), sizeof(out) - strlen(out), "/%d",
				 rl_ipv6_prefix);
	}
	else
		inet_ntop(AF_INET6, &bin.v6, out, sizeof(out));
	return pstrdup(out);
}

/*
 * Who is asking: the JWT subject, else the address in X-Forwarded-For
 * that the outermost of ratelimit.trusted_proxy_hops proxies wrote, else
 * the address of the connection, else nobody in particular.  Each kind
 * has its own prefix, so a subject can never be taken for an address.  A
 * header that names no usable address counts as absent: such requests
 * share the connection's limiter, which is safe, rather than get one of
 * their own choosing.
 */
static char *
rl_request_identity(void)
{
	char	   *sub = rl_json_setting_member("request.jwt.claims", "sub");

	if (sub != NULL && sub[0] != '\0')
		return psprintf("sub:%s", sub);

	if (rl_trusted_proxy_hops > 0)
	{
		char	   *xff = rl_json_setting_member("request.headers",
												 "x-forwarded-for");
		char	   *addr = xff != NULL ?
			rl_forwarded_address(xff, rl_trusted_proxy_hops) : NULL;

		if (addr != NULL)
			return psprintf("ip:%s", addr);
	}

	/* inet_client_addr(): NULL over a Unix socket. */
	{
		LOCAL_FCINFO(addr, 0);
		Datum		value;

		InitFunctionCallInfoData(*addr, NULL, 0, InvalidOid, NULL, NULL);
		value = inet_client_addr(addr);
		if (!addr->isnull)
			return psprintf("ip:%s",
							DatumGetCString(DirectFunctionCall1(inet_out, value)));
	}
	return pstrdup("anonymous");
}

/*
 * rl_postgrest_guard(algo, limit, window, key DEFAULT NULL,
 *					  burst DEFAULT NULL) RETURNS void
 *
 * Checks one request against the limiter (key, algo, limit, window,
 * burst) with cost 1; key NULL means the caller's identity as above.
 * Denied: the PGRST error, which PostgREST answers with HTTP 429.
 * Allowed: RateLimit and RateLimit-Policy response headers.  While Redis
 * is unavailable the failure policy answers, and an admitted request gets
 * no headers.
 */
Datum
rl_postgrest_guard(PG_FUNCTION_ARGS)
{
	RlLimiter	limiter = {0};

	rl_require_args(fcinfo, 3);
	limiter.algorithm = rl_parse_algorithm(PG_GETARG_TEXT_PP(0));
	limiter.limit = PG_GETARG_INT64(1);
	limiter.window_us = rl_window_us(PG_GETARG_INTERVAL_P(2));
	limiter.burst = rl_burst_arg(fcinfo, 4);
	rl_check_limiter(&limiter);
	return rl_postgrest_guard_run(fcinfo, &limiter, 3);
}

/*
 * rl_postgrest_guard(policy, key DEFAULT NULL) RETURNS void
 *
 * By policy name (rl_policies); the RateLimit fields name the policy.
 */
Datum
rl_postgrest_guard_policy(PG_FUNCTION_ARGS)
{
	RlLimiter	limiter;

	rl_require_args(fcinfo, 1);
	rl_policy_get_text(PG_GETARG_TEXT_PP(0), &limiter);
	return rl_postgrest_guard_run(fcinfo, &limiter, 1);
}

/* The guard's check of one request against limiter; the key at keyarg. */
static Datum
rl_postgrest_guard_run(FunctionCallInfo fcinfo, const RlLimiter *limiter,
					   int keyarg)
{
	RlAnswer	answer;
	char	   *key;
	int			keylen;
	int64		cost = 1;

	if (PG_NARGS() <= keyarg || PG_ARGISNULL(keyarg))
	{
		key = rl_request_identity();
		keylen = strlen(key);
		if (keylen > RL_MAX_KEY_BYTES)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("the caller's identity is longer than %d bytes",
							RL_MAX_KEY_BYTES),
					 errhint("Pass a shorter key, for example md5() of the identity.")));
	}
	else
		key = rl_check_key(PG_GETARG_TEXT_PP(keyarg), &keylen);

	rl_engine_check_keys(limiter, &key, &keylen, &cost, 1, &answer);

	if (!answer.allowed)
		rl_raise_postgrest("Rate limit exceeded",
						   limiter->algorithm == RL_CONCURRENCY ?
						   psprintf("At most " INT64_FORMAT " requests at a time are allowed.",
									limiter->limit) :
						   limiter->burst > 0 ?
						   psprintf("At most " INT64_FORMAT " requests per %s are allowed, in bursts of up to " INT64_FORMAT ".",
									limiter->limit, rl_window_text(limiter->window_us),
									limiter->burst) :
						   psprintf("At most " INT64_FORMAT " requests per %s are allowed.",
									limiter->limit, rl_window_text(limiter->window_us)),
						   psprintf("Retry after %s.",
									rl_seconds_up(answer.retry_after_ms) <= 1 ?
									"1 second" :
									psprintf(INT64_FORMAT " seconds",
											 rl_seconds_up(answer.retry_after_ms))),
						   &answer, limiter);
	if (answer.known)
		rl_add_response_headers(&answer, limiter);
	PG_RETURN_VOID();
}
