/*-------------------------------------------------------------------------
 *
 * rl_guc.c
 *	  The ratelimit.* settings.
 *
 * Every setting is PGC_SUSET: a role that could repoint Redis, shorten a
 * timeout or switch the failure mode could force a fail-open answer and
 * walk past its limits, and one that could change the key prefix could
 * spend another tenant's quota.  The passwords (Redis's and the
 * Sentinels') are masked for every role (see rl_show_password);
 * ratelimit.redis_password_file keeps Redis's out of the settings
 * altogether.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_guc.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <float.h>
#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"

#include "rl_guc.h"

int			rl_redis_mode = RL_MODE_STANDALONE;
char	   *rl_redis_nodes = NULL;
char	   *rl_redis_host = NULL;
int			rl_redis_port = 6379;
char	   *rl_redis_socket = NULL;
int			rl_redis_db = 0;
char	   *rl_redis_username = NULL;
char	   *rl_redis_password = NULL;
char	   *rl_redis_password_file = NULL;
char	   *rl_sentinel_master = NULL;
char	   *rl_sentinel_username = NULL;
char	   *rl_sentinel_password = NULL;
char	   *rl_sentinel_password_file = NULL;
int			rl_sentinel_check_interval = 1000;
bool		rl_redis_tls = false;
char	   *rl_redis_tls_ca_file = NULL;
char	   *rl_redis_tls_cert_file = NULL;
char	   *rl_redis_tls_key_file = NULL;
char	   *rl_redis_tls_server_name = NULL;
int			rl_connect_timeout = 1000;
int			rl_command_timeout = 500;
int			rl_failure_mode = RL_FAIL_OPEN;
int			rl_retry_interval = 1000;
char	   *rl_key_prefix = NULL;
bool		rl_enforce = true;
bool		rl_refund_on_abort = false;
bool		rl_stats_enabled = true;
int			rl_stats_max_limiters = 1000;
int			rl_max_policies = 1000;
bool		rl_isolate_databases = true;
int			rl_trusted_proxy_hops = 1;
int			rl_ipv6_prefix = 64;
double		rl_test_clock_ms = 0;
int			rl_engine = RL_ENGINE_REDIS;
int			rl_local_max_entries = 10000;
int			rl_local_log_entries = 262144;

/*
 * Bumped by the assign hook of every setting that names the endpoint or
 * its credentials; rl_conn_begin reconnects when it differs from the
 * generation its connections were opened under.
 */
uint64		rl_settings_generation = 1;

/* Set by _PG_init (ratelimit.c). */
bool		rl_preloaded = false;

static const struct config_enum_entry rl_failure_mode_options[] = {
	{"open", RL_FAIL_OPEN, false},
	{"closed", RL_FAIL_CLOSED, false},
	{"error", RL_FAIL_ERROR, false},
	{"local", RL_FAIL_LOCAL, false},
	{NULL, 0, false}
};

static const struct config_enum_entry rl_engine_options[] = {
	{"redis", RL_ENGINE_REDIS, false},
	{"local", RL_ENGINE_LOCAL, false},
	{NULL, 0, false}
};

static const struct config_enum_entry rl_redis_mode_options[] = {
	{"standalone", RL_MODE_STANDALONE, false},
	{"cluster", RL_MODE_CLUSTER, false},
	{"sentinel", RL_MODE_SENTINEL, false},
	{NULL, 0, false}
};

/*
 * Parses a comma-separated list of host:port (an IPv6 address in
 * brackets), blanks around entries allowed.  With hosts non-NULL, fills
 * hosts[] (palloc'd) and ports[], at most max.  Returns the number of
 * entries, or -1 with the reason in "why".  Called by the setting's check
 * hook, so it must not raise.
 */
int
rl_parse_nodes(const char *list, char **hosts, int *ports, int max,
			   char *why, size_t whysize)
{
	const char *p = list;
	int			n = 0;

	while (*p == ' ')
		p++;
	if (*p == '\0')
		return 0;
	for (;;)
	{
		const char *start;
		const char *end;
		const char *colon;
		char	   *endptr;
		long		port;
		size_t		hostlen;
		bool		bracketed;

		while (*p == ' ')
			p++;
		start = p;
		end = p + strcspn(p, ",");
		while (end > start && end[-1] == ' ')
			end--;
		colon = NULL;
		for (const char *q = start; q < end; q++)
		{
			if (*q == ':')
				colon = q;
		}
		if (colon == NULL || colon == start)
		{
			snprintf(why, whysize, "Entry \"%.*s\" is not host:port.",
					 (int) Min(end - start, 100), start);
			return -1;
		}
		port = strtol(colon + 1, &endptr, 10);
		if (endptr != end || colon + 1 == end || port < 1 || port > 65535)
		{
			snprintf(why, whysize, "Entry \"%.*s\" has no port between 1 and 65535.",
					 (int) Min(end - start, 100), start);
			return -1;
		}
		hostlen = colon - start;
		bracketed = start[0] == '[';
		if (bracketed)
		{
			if (hostlen < 3 || start[hostlen - 1] != ']')
			{
				snprintf(why, whysize, "Entry \"%.*s\" is not [address]:port.",
						 (int) Min(end - start, 100), start);
				return -1;
			}
			start++;
			hostlen -= 2;
		}
		for (size_t k = 0; k < hostlen; k++)
		{
			if (start[k] == ' ' || (start[k] == ':' && !bracketed))
			{
				snprintf(why, whysize, "Entry \"%.*s\" is not host:port (an IPv6 address goes in brackets).",
						 (int) Min(end - start, 100), start);
				return -1;
			}
		}
		if (hostlen > 255)
		{
			snprintf(why, whysize, "A host name in the list is longer than 255 bytes.");
			return -1;
		}
		if (n >= RL_MAX_NODES)
		{
			snprintf(why, whysize, "The list has more than %d entries.", RL_MAX_NODES);
			return -1;
		}
		if (hosts != NULL && n < max)
		{
			hosts[n] = pnstrdup(start, hostlen);
			ports[n] = (int) port;
		}
		n++;
		p = end;
		while (*p == ' ')
			p++;
		if (*p == '\0')
			break;
		if (*p != ',')
		{
			snprintf(why, whysize, "Entries must be separated by commas.");
			return -1;
		}
		p++;
	}
	return n;
}

/*
 * Settings are safe only when the library is loaded in the postmaster.
 * Loaded later, in a backend, its settings are placeholders until then:
 * any role could read the password, and a role's connection options
 * (PGOPTIONS) would be refused at load but would already have replaced
 * the configured values, leaving the built-in defaults (fail open, the
 * default endpoint and prefix).  So, like pg_stat_statements, refuse to
 * work unless preloaded; it is an ERROR, never a policy answer.
 */
void
rl_require_preload(void)
{
	if (!rl_preloaded)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ratelimit must be loaded via shared_preload_libraries"),
				 errdetail("Loaded later, its settings could be read or reset by any role before the library loads."),
				 errhint("Add 'ratelimit' to shared_preload_libraries and restart the server.")));
}

/*
 * The seed list is parsed at each map refresh (rl_cluster.c); a mistake
 * in it is refused here, when it is set, with the entry named.
 */
static bool
rl_check_nodes(char **newval, void **extra, GucSource source)
{
	char		why[256];

	if (rl_parse_nodes(*newval, NULL, NULL, 0, why, sizeof(why)) < 0)
	{
		GUC_check_errdetail("%s", why);
		return false;
	}
	return true;
}

/*
 * The key prefix goes in front of the {hash tag}; a brace in it would move
 * the tag and could split one limiter's keys across cluster slots.
 */
static bool
rl_check_key_prefix(char **newval, void **extra, GucSource source)
{
	if (strpbrk(*newval, "{}") != NULL)
	{
		GUC_check_errdetail("The key prefix must not contain \"{\" or \"}\".");
		return false;
	}
	if (strlen(*newval) > 64)
	{
		GUC_check_errdetail("The key prefix is limited to 64 bytes.");
		return false;
	}
	return true;
}

/*
 * The socket path is opened by every backend, whose working directory is
 * the data directory: a relative path would mean something else to a
 * reader of the configuration, so it is refused when set.
 */
static bool
rl_check_socket(char **newval, void **extra, GucSource source)
{
	if ((*newval)[0] != '\0' && (*newval)[0] != '/')
	{
		GUC_check_errdetail("The Redis socket must be given as an absolute path.");
		return false;
	}
	return true;
}

/*
 * The connection settings' assign hooks: a new value bumps
 * rl_settings_generation, so SET, RESET, a function's SET clause and
 * pg_reload_conf() take effect at the next call, which reconnects.  An
 * assign hook runs before the variable takes the new value, so the value
 * in force is at hand: a reload or SET that leaves the value as it was
 * keeps the connections.  The hooks run during SIGHUP processing and
 * when a transaction's settings roll back (again, with the old value:
 * one more reconnect, harmless), so they only compare and count; no I/O,
 * nothing that can fail.  The passwords are compared where they are; no
 * copy is kept.
 */
#define RL_ASSIGN_STRING(hook, var) \
static void \
hook(const char *newval, void *extra) \
{ \
	if ((var) == NULL || newval == NULL || strcmp(newval, (var)) != 0) \
		rl_settings_generation++; \
}

#define RL_ASSIGN_INT(hook, var) \
static void \
hook(int newval, void *extra) \
{ \
	if (newval != (var)) \
		rl_settings_generation++; \
}

#define RL_ASSIGN_BOOL(hook, var) \
static void \
hook(bool newval, void *extra) \
{ \
	if (newval != (var)) \
		rl_settings_generation++; \
}

RL_ASSIGN_INT(rl_assign_redis_mode, rl_redis_mode)
RL_ASSIGN_STRING(rl_assign_redis_nodes, rl_redis_nodes)
RL_ASSIGN_STRING(rl_assign_redis_host, rl_redis_host)
RL_ASSIGN_INT(rl_assign_redis_port, rl_redis_port)
RL_ASSIGN_STRING(rl_assign_redis_socket, rl_redis_socket)
RL_ASSIGN_INT(rl_assign_redis_db, rl_redis_db)
RL_ASSIGN_STRING(rl_assign_redis_username, rl_redis_username)
RL_ASSIGN_STRING(rl_assign_redis_password, rl_redis_password)
RL_ASSIGN_STRING(rl_assign_redis_password_file, rl_redis_password_file)
RL_ASSIGN_STRING(rl_assign_sentinel_master, rl_sentinel_master)
RL_ASSIGN_STRING(rl_assign_sentinel_username, rl_sentinel_username)
RL_ASSIGN_STRING(rl_assign_sentinel_password, rl_sentinel_password)
RL_ASSIGN_STRING(rl_assign_sentinel_password_file, rl_sentinel_password_file)
RL_ASSIGN_BOOL(rl_assign_redis_tls, rl_redis_tls)
RL_ASSIGN_STRING(rl_assign_redis_tls_ca_file, rl_redis_tls_ca_file)
RL_ASSIGN_STRING(rl_assign_redis_tls_cert_file, rl_redis_tls_cert_file)
RL_ASSIGN_STRING(rl_assign_redis_tls_key_file, rl_redis_tls_key_file)
RL_ASSIGN_STRING(rl_assign_redis_tls_server_name, rl_redis_tls_server_name)

/*
 * SHOW, current_setting() and every other view of the password go through
 * here: members of pg_read_all_settings may read superuser-only settings,
 * so the value itself is never shown, to anyone.  Whether one is set
 * still shows.  (Parallel workers get the real value by another path.)
 */
static const char *
rl_show_password(void)
{
	return (rl_redis_password != NULL && rl_redis_password[0] != '\0') ?
		"********" : "";
}

/* The Sentinel password, masked the same way. */
static const char *
rl_show_sentinel_password(void)
{
	return (rl_sentinel_password != NULL && rl_sentinel_password[0] != '\0') ?
		"********" : "";
}

/*
 * Defined from _PG_init.  The settings that name the endpoint and its
 * credentials have an assign hook (above) that tells rl_conn.c to
 * reconnect.
 */
void
rl_define_settings(void)
{
	DefineCustomEnumVariable("ratelimit.redis_mode",
							 "How Redis is deployed: standalone, cluster or sentinel.",
							 "In cluster mode every limiter goes to the master that serves its key's hash slot; in sentinel mode to the master the Sentinels name.",
							 &rl_redis_mode,
							 RL_MODE_STANDALONE,
							 rl_redis_mode_options,
							 PGC_SUSET,
							 0,
							 NULL,
							 rl_assign_redis_mode,
							 NULL);

	DefineCustomStringVariable("ratelimit.redis_nodes",
							   "Comma-separated host:port list: the cluster nodes to learn the slot map from, or the Sentinels.",
							   "In cluster mode, when empty, redis_host:redis_port is the one seed; sentinel mode needs the list.",
							   &rl_redis_nodes,
							   "",
							   PGC_SUSET,
							   0,
							   rl_check_nodes,
							   rl_assign_redis_nodes,
							   NULL);

	DefineCustomStringVariable("ratelimit.redis_host",
							   "Redis server host name or IP address.",
							   "A numeric address avoids a blocking DNS lookup.",
							   &rl_redis_host,
							   "127.0.0.1",
							   PGC_SUSET,
							   0,
							   NULL,
							   rl_assign_redis_host,
							   NULL);

	DefineCustomIntVariable("ratelimit.redis_port",
							"Redis server TCP port.",
							NULL,
							&rl_redis_port,
							6379,
							1,
							65535,
							PGC_SUSET,
							0,
							NULL,
							rl_assign_redis_port,
							NULL);

	DefineCustomStringVariable("ratelimit.redis_socket",
							   "Redis server Unix socket path; used instead of host and port when set.",
							   NULL,
							   &rl_redis_socket,
							   "",
							   PGC_SUSET,
							   0,
							   rl_check_socket,
							   rl_assign_redis_socket,
							   NULL);

	DefineCustomIntVariable("ratelimit.redis_db",
							"Redis logical database number.",
							NULL,
							&rl_redis_db,
							0,
							0,
							INT_MAX,
							PGC_SUSET,
							0,
							NULL,
							rl_assign_redis_db,
							NULL);

	DefineCustomStringVariable("ratelimit.redis_username",
							   "Redis ACL user name (with redis_password).",
							   NULL,
							   &rl_redis_username,
							   "",
							   PGC_SUSET,
							   0,
							   NULL,
							   rl_assign_redis_username,
							   NULL);

	DefineCustomStringVariable("ratelimit.redis_password",
							   "Redis password; redis_password_file is the safer way to give it.",
							   "Shown masked.  PostgreSQL logs its new value when a reload changes it.",
							   &rl_redis_password,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL,
							   NULL,
							   rl_assign_redis_password,
							   rl_show_password);

	DefineCustomStringVariable("ratelimit.redis_password_file",
							   "File whose first line is the Redis password; read at each connection.",
							   "It must not be readable by group or others.  When set, redis_password is not used.",
							   &rl_redis_password_file,
							   "",
							   PGC_SUSET,
							   0,
							   NULL,
							   rl_assign_redis_password_file,
							   NULL);

	DefineCustomStringVariable("ratelimit.sentinel_master",
							   "Name of the master the Sentinels monitor (as in \"sentinel monitor\").",
							   NULL,
							   &rl_sentinel_master,
							   "mymaster",
							   PGC_SUSET,
							   0,
							   NULL,
							   rl_assign_sentinel_master,
							   NULL);

	DefineCustomStringVariable("ratelimit.sentinel_username",
							   "ACL user name for the Sentinels (with sentinel_password).",
							   "The Redis credentials are used for the master.",
							   &rl_sentinel_username,
							   "",
							   PGC_SUSET,
							   0,
							   NULL,
							   rl_assign_sentinel_username,
							   NULL);

	DefineCustomStringVariable("ratelimit.sentinel_password",
							   "Password for the Sentinels (their requirepass).",
							   "Shown masked.  PostgreSQL logs its new value when a reload changes it.",
							   &rl_sentinel_password,
							   "",
							   PGC_SUSET,
							   GUC_SUPERUSER_ONLY | GUC_NO_SHOW_ALL,
							   NULL,
							   rl_assign_sentinel_password,
							   rl_show_sentinel_password);

	DefineCustomStringVariable("ratelimit.sentinel_password_file",
							   "File whose first line is the Sentinels' password; read at each connection.",
							   "It must not be readable by group or others.  When set, sentinel_password is not used.",
							   &rl_sentinel_password_file,
							   "",
							   PGC_SUSET,
							   0,
							   NULL,
							   rl_assign_sentinel_password_file,
							   NULL);

	/*
	 * After SENTINEL FAILOVER the old master stays writable for about ten
	 * seconds; every write a backend sends it then is lost.  One second
	 * bounds that window to a second past Sentinel's switch, at one
	 * Sentinel round trip per busy backend per second.
	 */
	DefineCustomIntVariable("ratelimit.sentinel_check_interval",
							"Longest time between two questions to the Sentinels about the master.",
							"0 asks only when the master is unknown or failed.",
							&rl_sentinel_check_interval,
							1000,
							0,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL,
							NULL,
							NULL);

	DefineCustomBoolVariable("ratelimit.redis_tls",
							 "Connects to Redis over TLS, verifying the server's certificate.",
							 NULL,
							 &rl_redis_tls,
							 false,
							 PGC_SUSET,
							 0,
							 NULL,
							 rl_assign_redis_tls,
							 NULL);

	DefineCustomStringVariable("ratelimit.redis_tls_ca_file",
							   "File of the certificate authorities that sign the Redis server's certificate.",
							   "Empty: the system's trusted authorities.",
							   &rl_redis_tls_ca_file,
							   "",
							   PGC_SUSET,
							   0,
							   NULL,
							   rl_assign_redis_tls_ca_file,
							   NULL);

	DefineCustomStringVariable("ratelimit.redis_tls_cert_file",
							   "Client certificate sent to Redis over TLS (with redis_tls_key_file).",
							   "Needed when the server sets tls-auth-clients.",
							   &rl_redis_tls_cert_file,
							   "",
							   PGC_SUSET,
							   0,
							   NULL,
							   rl_assign_redis_tls_cert_file,
							   NULL);

	DefineCustomStringVariable("ratelimit.redis_tls_key_file",
							   "Private key of redis_tls_cert_file; not protected by a passphrase.",
							   NULL,
							   &rl_redis_tls_key_file,
							   "",
							   PGC_SUSET,
							   0,
							   NULL,
							   rl_assign_redis_tls_key_file,
							   NULL);

	DefineCustomStringVariable("ratelimit.redis_tls_server_name",
							   "Name verified in the Redis server's certificate and sent as SNI.",
							   "Empty: the host connected to.",
							   &rl_redis_tls_server_name,
							   "",
							   PGC_SUSET,
							   0,
							   NULL,
							   rl_assign_redis_tls_server_name,
							   NULL);

	DefineCustomIntVariable("ratelimit.connect_timeout",
							"Time allowed to connect and authenticate to Redis.",
							NULL,
							&rl_connect_timeout,
							1000,
							1,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL,
							NULL,
							NULL);

	DefineCustomIntVariable("ratelimit.command_timeout",
							"Time allowed for one Redis round trip.",
							NULL,
							&rl_command_timeout,
							500,
							1,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL,
							NULL,
							NULL);

	DefineCustomEnumVariable("ratelimit.engine",
							 "Where the limiters live: redis, or local (this server's shared memory).",
							 "The local engine runs the same algorithms without Redis, for one server.",
							 &rl_engine,
							 RL_ENGINE_REDIS,
							 rl_engine_options,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	/*
	 * Sizes of shared memory, fixed at server start.  PostgreSQL refuses
	 * (FATAL) to define such a setting after start-up, so a library
	 * loaded late defines neither; it refuses every call anyway.
	 */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("ratelimit.local_max_entries",
								"Limiter states the local engine's shared table holds.",
								"Fixed at server start; about 300 bytes of shared memory each.",
								&rl_local_max_entries,
								10000,
								RL_LOCAL_PARTITIONS,
								INT_MAX / 2,
								PGC_POSTMASTER,
								0,
								NULL,
								NULL,
								NULL);

	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("ratelimit.local_log_entries",
								"Sliding-log calls the local engine's shared pool holds, over all keys.",
								"Fixed at server start; 16 bytes of shared memory each, taken in blocks of 32 per log.",
								&rl_local_log_entries,
								262144,
								RL_LOCAL_LOG_BLOCK,
								INT_MAX / 2,
								PGC_POSTMASTER,
								0,
								NULL,
								NULL,
								NULL);

	DefineCustomEnumVariable("ratelimit.failure_mode",
							 "Answer given while Redis is unavailable: open, closed, error or local.",
							 NULL,
							 &rl_failure_mode,
							 RL_FAIL_OPEN,
							 rl_failure_mode_options,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	DefineCustomIntVariable("ratelimit.retry_interval",
							"Time after a Redis failure during which no new attempt is made.",
							NULL,
							&rl_retry_interval,
							1000,
							0,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_MS,
							NULL,
							NULL,
							NULL);

	DefineCustomStringVariable("ratelimit.key_prefix",
							   "Prefix of every Redis key the extension writes.",
							   NULL,
							   &rl_key_prefix,
							   "rl:",
							   PGC_SUSET,
							   0,
							   rl_check_key_prefix,
							   NULL,
							   NULL);

	DefineCustomBoolVariable("ratelimit.isolate_databases",
							 "Keeps each database's limiters apart in Redis.",
							 "When off, the same key names the same limiter in every database.",
							 &rl_isolate_databases,
							 true,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	DefineCustomIntVariable("ratelimit.trusted_proxy_hops",
							"Number of trusted proxies in front of PostgREST that append to X-Forwarded-For.",
							"rl_postgrest_guard keys an anonymous caller by the entry that many places from the right; 0 ignores the header.",
							&rl_trusted_proxy_hops,
							1,
							0,
							RL_MAX_PROXY_HOPS,
							PGC_SUSET,
							0,
							NULL,
							NULL,
							NULL);

	DefineCustomIntVariable("ratelimit.ipv6_prefix",
							"Leading bits of an IPv6 client address that name one anonymous caller.",
							"A client usually holds a whole /64 and can send each request from another address in it; 128 keys each address apart.",
							&rl_ipv6_prefix,
							64,
							16,
							128,
							PGC_SUSET,
							0,
							NULL,
							NULL,
							NULL);

	DefineCustomBoolVariable("ratelimit.enforce",
							 "Enforces denials; off is shadow mode.",
							 "When off, every check runs and is counted as usual, denials included, but every call is answered as allowed.",
							 &rl_enforce,
							 true,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	DefineCustomBoolVariable("ratelimit.refund_on_abort",
							 "Gives back what a call by parameters took when its transaction aborts.",
							 "Applies to rl_allow and its kin called with an algorithm, limit and window; named policies follow their refund_on_abort column, triggers their refund option.  Refunded work could be repeated for free, so only work done inside the transaction should be refunded.",
							 &rl_refund_on_abort,
							 false,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	DefineCustomBoolVariable("ratelimit.deny_cache",
							 "Answers a denied limiter locally until its retry time has passed.",
							 "Spares Redis a flood on a denied key.  An rl_reset on this server is seen at once; one made elsewhere, when the cached denial expires.",
							 &rl_deny_cache,
							 true,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	DefineCustomBoolVariable("ratelimit.stats",
							 "Times Redis round trips and counts denials per limiter for the server-wide statistics.",
							 "The counters of rl_stats and rl_status() are kept either way; off leaves rl_stats_rtt and rl_stats_limiters unchanged.",
							 &rl_stats_enabled,
							 true,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("ratelimit.stats_max_limiters",
								"Number of limiters rl_stats_limiters keeps.",
								"When the table is full, the 5% of limiters with the fewest denials are dropped to make room.",
								&rl_stats_max_limiters,
								1000,
								10,
								100000,
								PGC_POSTMASTER,
								0,
								NULL,
								NULL,
								NULL);

	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("ratelimit.max_policies",
								"Number of policies rl_stats_policies counts.",
								"Each database's policies take a slot at their first call; when every slot is taken, further policies work but are not counted.",
								&rl_max_policies,
								1000,
								10,
								100000,
								PGC_POSTMASTER,
								0,
								NULL,
								NULL,
								NULL);

	DefineCustomRealVariable("ratelimit.test_clock_ms",
							 "Pins the limiter clock, in milliseconds since the Unix epoch (tests only).",
							 "0 uses the Redis server clock.",
							 &rl_test_clock_ms,
							 0,
							 0,
							 RL_MAX_TEST_CLOCK_MS,
							 PGC_SUSET,
							 0,
							 NULL,
							 NULL,
							 NULL);

	MarkGUCPrefixReserved("ratelimit");
}
