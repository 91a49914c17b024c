/*-------------------------------------------------------------------------
 *
 * rl_connect.c
 *	  Opening a backend's connection to one Redis node.
 *
 * A connection is a non-blocking connect waited for on the latch under
 * connect_timeout, the TLS handshake when redis_tls is on, then AUTH,
 * SELECT, CLIENT SETNAME and INFO in one round trip (led by a PING a
 * Sentinel must refuse, when its password is what guards Redis's:
 * rl_sentinel_guard).  The password comes from its setting or its file,
 * read afresh at each connection; it never reaches a message.  A failure
 * says whether a setting is wrong (which setting) or Redis is
 * unavailable, and rl_node.c records it.
 *
 * hiredis's reply reader gets its bound on arrays here, for the
 * connection's life: no reply to the extension's commands needs a large
 * array, and a peer that claims one must not make the backend allocate it
 * (the bound on bytes is checked as replies are read, rl_roundtrip.c).
 *
 * The rule for what keeps the Redis password from a master that is not
 * ours in sentinel mode (rl_sentinel_guard) lives here, where the
 * password leaves; rl_sentinel.c applies it before asking a Sentinel.
 * rl_node_open opens a node's link when it has none.  In redis/'s order
 * (test/layers.sh's ORDER; rl_conn.c's banner) this file calls only
 * rl_roundtrip.c, rl_node.c and rl_link.c below it.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_connect.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "miscadmin.h"
#include "storage/fd.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "rl_node.h"
#include "rl_compat.h"

/* Longest password accepted from ratelimit.redis_password_file. */
#define RL_MAX_PASSWORD_BYTES	1024

/* hiredis's reply builders, with arrays bounded (see RL_MAX_REPLY_ELEMENTS). */
static redisReplyObjectFunctions rl_reply_functions;
static void *(*rl_hiredis_create_array) (const redisReadTask *, rl_hiredis_elements) = NULL;

/* hiredis's createArray, refusing tables no reply of ours needs. */
static void *
rl_create_array(const redisReadTask *task, rl_hiredis_elements elements)
{
	if (elements > (rl_large_replies ? RL_MAX_LARGE_ELEMENTS : RL_MAX_REPLY_ELEMENTS))
	{
		rl_refused_elements = (int) Min(elements, INT_MAX);
		return NULL;			/* hiredis: a protocol error, nothing allocated */
	}
	return rl_hiredis_create_array(task, elements);
}

/*
 * The password setting that serves node: the Sentinels' own, or Redis's;
 * its _file form when that is set (it then wins over the value).
 */
static const char *
rl_password_setting(const RlNode *node)
{
	if (node != NULL && node->sentinel)
		return rl_sentinel_password_file[0] != '\0' ?
			"ratelimit.sentinel_password_file" : "ratelimit.sentinel_password";
	return rl_redis_password_file[0] != '\0' ?
		"ratelimit.redis_password_file" : "ratelimit.redis_password";
}

/*
 * The password to send to rl_conn_cur, into buf: the first line of the
 * password file when one is set (redis_password_file, or for a Sentinel
 * sentinel_password_file), else the password setting.  The file is read
 * afresh at each connection, so a new password needs no reload; it is
 * refused unless only its owner may read it, as libpq refuses a .pgpass
 * that group or others can read.  False, with the reason in "why", when
 * the password cannot be used; no reason ever quotes the file's content.
 */
static bool
rl_password(char *buf, size_t size, char *why, size_t whysize)
{
	bool		sentinel = rl_conn_cur != NULL && rl_conn_cur->sentinel;
	const char *path = sentinel ? rl_sentinel_password_file : rl_redis_password_file;
	const char *value = sentinel ? rl_sentinel_password : rl_redis_password;
	const char *setting = rl_password_setting(rl_conn_cur);
	struct stat st;
	int			fd;
	ssize_t		n;
	size_t		len;

	if (path[0] == '\0')
	{
		if (strlen(value) > size - 2)
		{
			snprintf(why, whysize, "%s is longer than %d bytes",
					 setting, (int) size - 2);
			return false;
		}
		strlcpy(buf, value, size);
		return true;
	}

	/* O_NONBLOCK: a FIFO named here must not hang the backend in open(). */
	fd = OpenTransientFile(path, O_RDONLY | O_NONBLOCK | PG_BINARY);
	if (fd < 0)
	{
		snprintf(why, whysize, "could not open %s \"%s\": %s",
				 setting, path, strerror(errno));
		return false;
	}
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
	{
		snprintf(why, whysize, "%s \"%s\" is not a regular file",
				 setting, path);
		CloseTransientFile(fd);
		return false;
	}
	if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0)
	{
		snprintf(why, whysize,
				 "%s \"%s\" has group or world access (mode %04o); it must be u=rw (0600) or less",
				 setting, path, (unsigned int) (st.st_mode & 07777));
		CloseTransientFile(fd);
		return false;
	}
	n = read(fd, buf, size - 1);
	CloseTransientFile(fd);
	if (n < 0)
	{
		snprintf(why, whysize, "could not read %s \"%s\": %s",
				 setting, path, strerror(errno));
		return false;
	}
	buf[n] = '\0';
	len = strcspn(buf, "\r\n");
	if (len == (size_t) n && n == (ssize_t) size - 1)
	{
		explicit_bzero(buf, size);
		snprintf(why, whysize,
				 "the first line of %s \"%s\" is longer than %d bytes",
				 setting, path, (int) size - 2);
		return false;
	}
	explicit_bzero(buf + len, size - len);
	if (len == 0)
	{
		snprintf(why, whysize, "the first line of %s \"%s\" is empty",
				 setting, path);
		return false;
	}
	return true;
}

/*
 * The setting a failed connect points at: a socket path that is not there,
 * or a host name that does not resolve.  A refused connection is an
 * outage (nothing listens there now); a socket that may not be opened is
 * rl_connect_failed's own case.
 */
static const char *
rl_connect_setting(const RlNode *node, const char *errstr)
{
	if (node->host != NULL)
	{
		/* A cluster node: a seed of redis_nodes, or an address it gave. */
		if (strstr(errstr, "Name or service not known") != NULL ||
			strstr(errstr, "No address associated") != NULL)
			return "ratelimit.redis_nodes";
		return NULL;
	}
	if (rl_redis_socket[0] != '\0')
	{
		char		dir[MAXPGPATH];
		struct stat st;

		if (strstr(errstr, "Not a directory") != NULL)
			return "ratelimit.redis_socket";

		/*
		 * Redis removes its socket when it stops, so a missing socket in a
		 * directory that is there is a server being restarted; a missing
		 * directory is a wrong path.
		 */
		if (strstr(errstr, "No such file") != NULL)
		{
			strlcpy(dir, rl_redis_socket, sizeof(dir));
			get_parent_directory(dir);
			if (stat(dir[0] != '\0' ? dir : "/", &st) != 0 || !S_ISDIR(st.st_mode))
				return "ratelimit.redis_socket";
		}
		return NULL;
	}
	/* A name that does not resolve; a failing resolver is an outage. */
	if (strstr(errstr, "Name or service not known") != NULL ||
		strstr(errstr, "No address associated") != NULL)
		return "ratelimit.redis_host";
	return NULL;
}

/*
 * Reports a connect that failed with hiredis's errstr: a configuration
 * error names what to fix, anything else is an outage.  A socket the
 * server's OS user may not open (EACCES: Debian's is mode 770, group
 * redis) has the right path; the fix is in the OS, so the message names
 * the permission check and what to do, not ratelimit.redis_socket.
 * hiredis's errstr is strerror's text, compared as such.
 */
static void
rl_connect_failed(const RlNode *node, const char *errstr)
{
	const char *setting;

	if (node->host == NULL && rl_redis_socket[0] != '\0' &&
		strcmp(errstr, strerror(EACCES)) == 0)
	{
		rl_conn_misconfigured("the socket's permissions",
							  "could not connect to Redis: permission denied; "
							  "add the PostgreSQL server's OS user to the socket's group "
							  "(e.g. usermod -aG redis postgres) and restart PostgreSQL, "
							  "or widen Redis's unixsocketperm");
		return;
	}
	setting = rl_connect_setting(node, errstr);
	if (setting != NULL)
		rl_conn_misconfigured(setting, "could not connect to Redis: %s", errstr);
	else
		rl_conn_failure(RL_FAILED_CONNECT, false, "could not connect to Redis: %s", errstr);
}

/*
 * Copies the value of INFO field NAME (a line "NAME:value") into buf;
 * false when the reply has no such line.
 */
static bool
rl_info_field(const char *info, const char *name, char *buf, size_t size)
{
	size_t		namelen = strlen(name);
	const char *p = info;

	while (p != NULL)
	{
		if (strncmp(p, name, namelen) == 0 && p[namelen] == ':')
		{
			size_t		len;

			p += namelen + 1;
			len = Min(strcspn(p, "\r\n"), size - 1);
			memcpy(buf, p, len);
			buf[len] = '\0';
			return true;
		}
		p = strchr(p, '\n');
		if (p != NULL)
			p++;
	}
	return false;
}

/*
 * The server's product and its own version, from an INFO server reply.
 * Valkey keeps redis_version at 7.2.4 for clients that test it, and names
 * itself in server_name with its version in valkey_version: a server that
 * names itself is taken at its word ("<name>_version"), any other is
 * Redis (redis_version).  The feature checks (the Redis 5 floor below,
 * Functions in rl_node_has_functions) read this version.  A name that is
 * not a plain word is ignored, so a peer's bytes never reach a message.
 */
static void
rl_parse_version(RlNode *node, const char *info)
{
	char		field[sizeof(node->server_name) + sizeof("_version")];
	char	   *name = node->server_name;

	node->server_version[0] = '\0';
	if (rl_info_field(info, "server_name", name, sizeof(node->server_name)) &&
		name[0] != '\0' && strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_-") == strlen(name))
	{
		snprintf(field, sizeof(field), "%s_version", name);
		if (rl_info_field(info, field, node->server_version, sizeof(node->server_version)))
			return;
	}
	strlcpy(name, "redis", sizeof(node->server_name));
	(void) rl_info_field(info, "redis_version", node->server_version,
						 sizeof(node->server_version));
}

/*
 * The TLS handshake over the node's connected socket, waited for on the
 * latch under the connect deadline.  False (recorded) when it fails: a
 * certificate that did not verify, a file that cannot be used, or a peer
 * that does not speak TLS is a configuration error naming the setting;
 * a timeout or a reset is an outage.
 */
static bool
rl_tls_connect(RlNode *node, TimestampTz deadline)
{
	const char *setting = NULL;
	char		why[256];

	if (!rl_tls_prepare(&setting, why, sizeof(why)))
	{
		if (setting != NULL)
			rl_conn_misconfigured(setting, "%s", why);
		else
			rl_conn_failure(RL_FAILED_UNAVAILABLE, false, "%s", why);
		return false;
	}
	node->ssl = rl_tls_start(node->ctx, rl_node_host(node));
	if (node->ssl == NULL)
	{
		rl_conn_failure(RL_FAILED_LOST, false, "could not start TLS: %s", node->ctx->errstr);
		return false;
	}
	for (;;)
	{
		RlIo		io = rl_tls_handshake(node->ssl, node->ctx);

		if (io == RL_IO_DONE)
			return true;
		if (io == RL_IO_ERROR)
		{
			setting = rl_tls_error_setting();
			if (setting != NULL)
				rl_conn_misconfigured(setting, "TLS handshake failed: %s",
									  node->ctx->errstr);
			else
				rl_conn_failure(RL_FAILED_UNAVAILABLE, false, "TLS handshake failed: %s",
								node->ctx->errstr);
			return false;
		}
		if (!rl_node_wait(node, rl_node_io_events(io), deadline))
		{
			rl_conn_failure(RL_FAILED_TIMEOUT, false, "timed out in the TLS handshake with Redis (a server that does not speak TLS on this port waits like this too)");
			return false;
		}
	}
}

/*
 * What keeps the Redis password from a master that is not ours.  The
 * connection to the master the Sentinels name opens with AUTH, before
 * ROLE can say anything about the server: whoever can make a Sentinel
 * name an address of theirs (SENTINEL MONITOR on a Sentinel that takes
 * commands from anyone) would be sent the password, and could then answer
 * every call, or write to Redis itself.  So with a Redis password one of
 * two must hold:
 *  - TLS verifies the master against ratelimit.redis_tls_ca_file or
 *    ratelimit.redis_tls_server_name (rl_link.c always verifies the
 *    certificate and the name).  Not the system's authorities checked
 *    against the address a Sentinel gave: anyone can get a public
 *    certificate for a name or address of their own.
 *  - The Sentinels require a password (sentinel_password or its file),
 *    so no outsider can reconfigure them.  Our password being accepted
 *    does not prove it (an ACL user's password is accepted while the
 *    default user may still be open), so each Sentinel must also refuse
 *    a command sent before AUTH (rl_node_connect's probe).
 * Without a Redis password there is no secret to keep: the deployment
 * already trusts whoever reaches its servers.
 */
RlSentinelGuard
rl_sentinel_guard(void)
{
	if (rl_redis_password[0] == '\0' && rl_redis_password_file[0] == '\0')
		return RL_GUARD_UNNEEDED;
	if (rl_redis_tls &&
		(rl_redis_tls_ca_file[0] != '\0' || rl_redis_tls_server_name[0] != '\0'))
		return RL_GUARD_TLS;
	if (rl_sentinel_password[0] != '\0' || rl_sentinel_password_file[0] != '\0')
		return RL_GUARD_SENTINEL_AUTH;
	return RL_GUARD_MISSING;
}

/*
 * False (recorded, naming the settings) when nothing guards the Redis
 * password: checked before any Sentinel is asked, and again where AUTH
 * would leave for the master (rl_node_connect).
 */
bool
rl_sentinel_guarded(void)
{
	if (rl_sentinel_guard() != RL_GUARD_MISSING)
		return true;
	rl_conn_misconfigured("ratelimit.sentinel_password or ratelimit.redis_tls_ca_file",
						  "the Redis password would go to whatever server a Sentinel names: set the Sentinels' password, or ratelimit.redis_tls with redis_tls_ca_file or redis_tls_server_name");
	return false;
}

/*
 * A Sentinel trusted to guard the Redis password answered a command sent
 * before AUTH: anyone could reconfigure it.  Recorded on the Sentinel;
 * its answers are not taken.
 */
void
rl_sentinel_refuse_open(void)
{
	rl_conn_misconfigured("the Sentinels' requirepass or ratelimit.redis_tls_ca_file",
						  "it answers clients that have not authenticated, so anyone could make it name a server of theirs for the Redis password");
}

/*
 * Opens the connection: a non-blocking connect waited for under
 * connect_timeout, the TLS handshake when redis_tls is on, then AUTH, SELECT, CLIENT SETNAME and INFO in one round
 * trip.  The client name (pg:<database oid>:<pid>) tells an operator which
 * backend a Redis client belongs to.  Secrets never reach a message.
 */
bool
rl_node_connect(RlNode *node)
{
	TimestampTz deadline;
	redisContext *c;
	const char *argv[5][4];
	size_t		argvlen[5][4];
	RlCommand	cmds[5];
	redisReply *replies[5];
	int			n = 0;
	int			optional;
	bool		probe;
	int			first = 0;
	bool		connected;
	int			err = 0;
	socklen_t	errlen = sizeof(err);
	char		db[16];
	char		name[64];
	char		password[RL_MAX_PASSWORD_BYTES + 2];
	char		why[256];
	bool		ok;

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   rl_connect_timeout);
	rl_conn_cur = node;

	if (!rl_password(password, sizeof(password), why, sizeof(why)))
	{
		rl_conn_misconfigured(rl_password_setting(node), "%s", why);
		return false;
	}

	/*
	 * The master the Sentinels named is sent the Redis password only while
	 * something vouches for it (rl_sentinel_check applied the rule before
	 * any Sentinel was asked; this is where the password would leave).
	 */
	if (rl_redis_mode == RL_MODE_SENTINEL && !node->sentinel &&
		password[0] != '\0' && !rl_sentinel_guarded())
	{
		explicit_bzero(password, sizeof(password));
		return false;
	}

	/*
	 * The socket and the wait set's epoll descriptor both count against
	 * the backend's budget of external descriptors, which postgres_fdw and
	 * dblink share.  Both are reserved first, so that a backend out of
	 * descriptors is an outage for the policy to answer, not an ERROR from
	 * inside CreateWaitEventSet; the second goes back just before the wait
	 * set takes it.
	 */
	if (!AcquireExternalFD())
	{
		explicit_bzero(password, sizeof(password));
		rl_conn_failure(RL_FAILED_CONNECT, false, "could not connect to Redis: too many open files");
		return false;
	}
	if (!AcquireExternalFD())
	{
		ReleaseExternalFD();
		explicit_bzero(password, sizeof(password));
		rl_conn_failure(RL_FAILED_CONNECT, false, "could not connect to Redis: too many open files");
		return false;
	}
	if (node->host != NULL)
		c = redisConnectNonBlock(node->host, node->port);
	else if (rl_redis_socket[0] != '\0')
		c = redisConnectUnixNonBlock(rl_redis_socket);
	else
		c = redisConnectNonBlock(rl_redis_host, rl_redis_port);
	if (c == NULL || c->err)
	{
		char		msg[128];

		strlcpy(msg, c != NULL ? c->errstr : "out of memory", sizeof(msg));
		if (c != NULL)
			redisFree(c);
		ReleaseExternalFD();
		ReleaseExternalFD();
		explicit_bzero(password, sizeof(password));
		rl_connect_failed(node, msg);
		return false;
	}
	node->ctx = c;
	rl_counters.connects++;
	if (rl_hiredis_create_array == NULL)
	{
		rl_reply_functions = *c->reader->fn;
		rl_hiredis_create_array = rl_reply_functions.createArray;
		rl_reply_functions.createArray = rl_create_array;
	}
	c->reader->fn = &rl_reply_functions;
	rl_refused_elements = 0;

	/*
	 * Building the wait set can still fail (epoll_create1 itself, out of
	 * memory): the ERROR must not leave a connection without one behind.
	 */
	ReleaseExternalFD();
	PG_TRY();
	{
		node->waitset = rl_create_wait_event_set(TopMemoryContext, 3);
		AddWaitEventToSet(node->waitset, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch,
						  NULL);
		AddWaitEventToSet(node->waitset, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET,
						  NULL, NULL);
		node->sock_pos = AddWaitEventToSet(node->waitset, WL_SOCKET_WRITEABLE,
										   c->fd, NULL, NULL);
		node->sock_events = WL_SOCKET_WRITEABLE;
		connected = rl_node_wait(node, WL_SOCKET_WRITEABLE, deadline);
	}
	PG_CATCH();
	{
		explicit_bzero(password, sizeof(password));
		rl_node_discard(node);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (!connected)
	{
		explicit_bzero(password, sizeof(password));
		rl_conn_failure(RL_FAILED_TIMEOUT, false, "timed out connecting to Redis");
		return false;
	}
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &errlen) != 0 || err != 0)
	{
		explicit_bzero(password, sizeof(password));
		rl_conn_failure(RL_FAILED_CONNECT, false, "could not connect to Redis: %s",
						strerror(err != 0 ? err : errno));
		return false;
	}
	if (rl_redis_tls)
	{
		PG_TRY();
		{
			ok = rl_tls_connect(node, deadline);
		}
		PG_CATCH();
		{
			/* A half-done handshake must not be taken for a link. */
			explicit_bzero(password, sizeof(password));
			rl_node_discard(node);
			PG_RE_THROW();
		}
		PG_END_TRY();
		if (!ok)
		{
			explicit_bzero(password, sizeof(password));
			return false;
		}
	}

	/*
	 * The handshake, one round trip.  A Sentinel whose password guards
	 * Redis's must refuse a command sent before AUTH: one that answers it
	 * takes orders from anyone, whatever password it also accepts.
	 */
	probe = node->sentinel && rl_sentinel_guard() == RL_GUARD_SENTINEL_AUTH;
	if (probe)
	{
		argv[n][0] = "PING";
		cmds[n].argc = 1;
		n++;
	}
	if (password[0] != '\0')
	{
		int			k = 0;

		argv[n][k++] = "AUTH";
		if ((node->sentinel ? rl_sentinel_username : rl_redis_username)[0] != '\0')
			argv[n][k++] = node->sentinel ? rl_sentinel_username : rl_redis_username;
		argv[n][k++] = password;
		cmds[n].argc = k;
		n++;
	}
	/* A cluster has only database 0 (rl_conn_begin checked it is so). */
	if (rl_redis_db != 0 && !node->sentinel && rl_redis_mode != RL_MODE_CLUSTER)
	{
		snprintf(db, sizeof(db), "%d", rl_redis_db);
		argv[n][0] = "SELECT";
		argv[n][1] = db;
		cmds[n].argc = 2;
		n++;
	}
	snprintf(name, sizeof(name), "pg:%u:%d", MyDatabaseId, MyProcPid);
	optional = n;
	argv[n][0] = "CLIENT";
	argv[n][1] = "SETNAME";
	argv[n][2] = name;
	cmds[n].argc = 3;
	n++;
	argv[n][0] = "INFO";
	argv[n][1] = "server";
	cmds[n].argc = 2;
	n++;
	for (int i = 0; i < n; i++)
	{
		for (int k = 0; k < cmds[i].argc; k++)
			argvlen[i][k] = strlen(argv[i][k]);
		cmds[i].argv = argv[i];
		cmds[i].argvlen = argvlen[i];
	}

	/*
	 * The probe goes in a round trip of its own: Valkey 8.0 sends no reply
	 * to a failed AUTH pipelined behind a command it refused with NOAUTH,
	 * so a wrong password would look like a server that does not answer.
	 */
	PG_TRY();
	{
		ok = !probe || rl_node_roundtrip(node, cmds, 1, replies, deadline, false);
		if (ok)
			ok = rl_node_roundtrip(node, cmds + (probe ? 1 : 0), n - (probe ? 1 : 0),
								   replies + (probe ? 1 : 0), deadline, false);
	}
	PG_CATCH();
	{
		explicit_bzero(password, sizeof(password));
		if (probe)
			rl_free_replies(replies, 1);
		PG_RE_THROW();
	}
	PG_END_TRY();
	explicit_bzero(password, sizeof(password));
	if (!ok)
	{
		if (probe)
			rl_free_replies(replies, 1);
		return false;
	}
	if (probe)
	{
		if (replies[0]->type != REDIS_REPLY_ERROR)
		{
			rl_free_replies(replies, n);
			rl_sentinel_refuse_open();
			return false;
		}
		/* Refused as it must be; another refusal is reported below. */
		if (strncmp(replies[0]->str, "NOAUTH", 6) == 0 ||
			strncmp(replies[0]->str, "NOPERM", 6) == 0)
			first = 1;
	}
	for (int i = first; i < n; i++)
	{
		/*
		 * CLIENT SETNAME and INFO only label the connection: an ACL user
		 * with just the commands the scripts need may run neither, a
		 * server may have renamed them away, and the limiter works
		 * without them.
		 */
		if (i >= optional && replies[i]->type == REDIS_REPLY_ERROR &&
			(strncmp(replies[i]->str, "NOPERM", 6) == 0 ||
			 strncmp(replies[i]->str, "ERR unknown command", 19) == 0))
			continue;
		if (replies[i]->type == REDIS_REPLY_ERROR)
		{
			/*
			 * A wrong password or database is ours to fix; max clients,
			 * LOADING ... are the server's state.  Of a reply to AUTH only
			 * the error code (WRONGPASS, NOAUTH, ERR ...) is kept: Redis
			 * may quote the password in the rest (a server that has AUTH
			 * renamed away answers "ERR unknown command 'AUTH', with args
			 * beginning with: '<user>' '<password>'").
			 */
			char		msg[200];
			const char *setting;

			setting = rl_reply_setting(replies[i]->str);
			if (strcmp(argv[i][0], "AUTH") == 0)
				strlcpy(msg, replies[i]->str,
						Min(sizeof(msg), strcspn(replies[i]->str, " ") + 1));
			else
				rl_reply_text(replies[i]->str, msg, sizeof(msg));
			rl_free_replies(replies, n);
			if (setting != NULL)
				rl_conn_misconfigured(setting, "Redis refused the connection: %s", msg);
			else
				rl_conn_failure(RL_FAILED_REFUSED, false, "Redis refused the connection: %s", msg);
			return false;
		}

		/*
		 * AUTH, SELECT and CLIENT SETNAME answer +OK, INFO a bulk string:
		 * anything else comes from a peer out of step, or not Redis.
		 */
		if (replies[i]->type != (i == n - 1 ? REDIS_REPLY_STRING : REDIS_REPLY_STATUS))
		{
			rl_free_replies(replies, n);
			rl_conn_failure(RL_FAILED_PROTOCOL, false, "unexpected reply to %s from Redis", argv[i][0]);
			return false;
		}
	}
	if (replies[n - 1]->type == REDIS_REPLY_STRING)
		rl_parse_version(node, replies[n - 1]->str);
	rl_free_replies(replies, n);

	/*
	 * The scripts call TIME before writing, which needs the effects
	 * replication of Redis 5, and set several hash fields at once (Redis
	 * 4): an older server would fail every call with a script error.
	 */
	if (node->server_version[0] != '\0' && atoi(node->server_version) < 5)
	{
		char		name[sizeof(node->server_name)];
		char		version[sizeof(node->server_version)];

		strlcpy(name, node->server_name, sizeof(name));
		strlcpy(version, node->server_version, sizeof(version));
		rl_node_discard(node);
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("Redis server %s runs %s %s, which is too old",
						rl_conn_endpoint(), name, version),
				 errhint("ratelimit needs Redis 5.0 or later, or Valkey.")));
	}
	return true;
}

/*
 * An idle connection that Redis closed (idle timeout, CLIENT KILL, restart)
 * shows as readable with nothing or an error to read.  Checking before
 * sending costs one non-blocking recv and lets us reconnect safely, since
 * nothing was sent on the dead link.
 */
static bool
rl_link_is_stale(RlNode *node)
{
	return !rl_link_idle_ok(node->ctx, node->ssl);	/* EOF, an error, or stray bytes */
}


/*
 * Makes sure the node has a usable connection, and makes it the current
 * node.  False means the node is unavailable for this call: inside its
 * retry interval after a failure, or a connection attempt that just
 * failed (recorded).  *opened (when not NULL) says whether the link was
 * opened just now: rl_conn.c's rl_node_ready then has a master the
 * Sentinels named confirm its role.
 */
bool
rl_node_open(RlNode *node, bool *opened)
{
	if (opened != NULL)
		*opened = false;
	rl_conn_cur = node;
	if (node->retry_at != 0 && GetCurrentTimestamp() < node->retry_at)
		return false;

	if (node->ctx != NULL && rl_link_is_stale(node))
		rl_node_discard(node);
	if (node->ctx == NULL)
	{
		rl_nodes_close_at_exit();
		if (!rl_node_connect(node))
			return false;
		if (opened != NULL)
			*opened = true;
	}
	return true;
}
