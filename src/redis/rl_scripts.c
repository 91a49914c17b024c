/*-------------------------------------------------------------------------
 *
 * rl_scripts.c
 *	  Running the embedded Lua scripts with FCALL or EVALSHA.
 *
 * The scripts are compiled into the library (rl_scripts_gen.h, made from
 * lua/ at build time) together with their SHA1s, and as one Redis
 * Functions library named by the SHA1 of its code (ratelimit_<id>, its
 * functions rl_<id>_<script>: two versions of the extension sharing a
 * Redis each have their own, and neither replaces the other's).  A call
 * is one FCALL where the node has Functions (Redis 7.0 or later; the
 * functions are made once, at load, not on every call as a script's
 * are: 1.5 to 3 us less Redis time per check), else one EVALSHA; never a
 * per-call load.
 *
 * What Redis lost comes back once per node, not once per call, in the
 * next round trip to it: "Function not found" (a FUNCTION FLUSH, or a
 * restart without persistence) puts FUNCTION LOAD ahead of the calls sent
 * again; NOSCRIPT (restart, fail-over, SCRIPT FLUSH) sends the first of
 * them of each script as EVAL, which puts it back in the cache for the
 * EVALSHAs behind it.  Both replies prove the call did not run, so it
 * may be sent again.  A FUNCTION LOAD answered "already exists" found the
 * library another backend loaded first; one the ACL refuses (or an FCALL
 * it refuses, which did not run either) makes that node use EVALSHA until
 * the settings change.  Functions replicate to replicas and persist with
 * the data, so a promoted replica or a restarted server normally has the
 * library.
 *
 * Replies are sorted into two classes.  Unavailable (BUSY, LOADING, OOM,
 * READONLY, NOREPLICAS, MISCONF ...) is Redis's state, answered by the
 * failure policy, call by call: in a pipelined batch the calls Redis did
 * run keep their answers.
 * Misuse (WRONGTYPE, NOPERM, script errors, odd replies) is an ERROR: a
 * limiter that admits everything when its keys are wrong would hide the
 * mistake.  A NOPERM names the command the Redis user lacks.
 *
 * In cluster mode (rl_run_cluster) each command goes to the master of its
 * key's hash slot, and the replies that prove a command did not run are
 * followed, in the same call: MOVED (resend where it says, and fix the
 * slot map), ASK (ASKING and the command, once, to the node it names),
 * TRYAGAIN (the same node after 10 ms, at most 3 times; then the policy
 * answers those keys, and the node goes on serving the others), NOSCRIPT
 * and "Function not found" (the same node, once what it lost is loaded)
 * and READONLY (a demoted master: fetch the map, resend), at most
 * RL_CLUSTER_MAX_HOPS times per command.  A command whose reply never
 * came (timeout, cancel, broken link) is never sent again: its node's link
 * is dropped and its keys get the policy's answer; the other nodes'
 * answers stand.
 *
 * This file sends calls and sorts replies; rl_redis.c builds the calls
 * from the engine's checks and turns the replies into answers, and
 * leaves a call without one unanswered, with the failure of the node it
 * went to (rl_scripts_call_node).
 *
 * In redis/'s order (test/layers.sh's ORDER; rl_conn.c's banner) this
 * file is above the link and both topologies, below rl_redis.c only.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/redis/rl_scripts.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"

#include "rl_cluster.h"
#include "rl_scripts.h"

typedef struct RlScriptSource
{
	const char *name;
	const char *sha1;
	const char *text;
} RlScriptSource;

#include "rl_scripts_gen.h"

/* Most round trips one call takes for what a node lost (see above). */
#define RL_RELOAD_PASSES	3

/* FCALL's function names: RL_FUNCTION_PREFIX and the script's name. */
static char rl_function_names[RL_NUM_SCRIPTS][64];

static const char *rl_load_argv[3] = {"FUNCTION", "LOAD", rl_library_text};
static size_t rl_load_len[3] = {8, 4, sizeof(rl_library_text) - 1};

StaticAssertDecl(lengthof(rl_script_sources) == RL_NUM_SCRIPTS,
				 "script table does not match the algorithm list");

/* Error replies that mean "Redis cannot serve now", not "you erred". */
static const char *const rl_unavailable_prefixes[] = {
	"BUSY",
	"LOADING",
	"OOM",
	"READONLY",
	"NOREPLICAS",				/* min-replicas-to-write not met */
	"MISCONF",					/* writes stopped after a failed save */
	"MASTERDOWN",
	"NOAUTH",
	"WRONGPASS",
	"CLUSTERDOWN",
	"TRYAGAIN",
	"ERR max number of clients",
	NULL
};

static bool
rl_reply_unavailable(const redisReply *reply)
{
	for (int i = 0; rl_unavailable_prefixes[i] != NULL; i++)
	{
		if (strncmp(reply->str, rl_unavailable_prefixes[i],
					strlen(rl_unavailable_prefixes[i])) == 0)
			return true;
	}
	return false;
}

/*
 * Copies into name the command that line "line" of a script calls
 * (redis.call('HSET', ...)), or "a command" if that line calls none.
 */
static void
rl_script_line_command(const char *text, int line, char *name, size_t len)
{
	const char *p = text;
	const char *call;
	const char *end;

	strlcpy(name, "a command", len);
	for (int i = 1; i < line && p != NULL; i++)
	{
		p = strchr(p, '\n');
		if (p != NULL)
			p++;
	}
	if (p == NULL)
		return;
	end = strchr(p, '\n');
	call = strstr(p, "redis.call('");
	if (call == NULL || (end != NULL && call > end))
		return;
	call += strlen("redis.call('");
	end = strchr(call, '\'');
	if (end != NULL && end - call < (ptrdiff_t) len)
		strlcpy(name, call, end - call + 1);
}

/*
 * Raises the ERROR for a refusal by the Redis user's ACL, if msg is one,
 * naming what the user lacks.  Redis names a plain command it refused
 * ("NOPERM this user has no permissions to run the 'del' command"), but
 * of a command a script ran it gives only the line ("The user executing
 * the script can't run this command or subcommand script: <sha1>, on
 * @user_script:46."): the script is ours, so its line says which.
 * Called with the replies already freed; msg is a copy.
 */
static void
rl_raise_acl_refusal(const char *msg, const RlScriptCall *call)
{
	const char *at = strstr(msg, "@user_script:");
	const char *fn_at = strstr(msg, "@user_function:");
	const char *quote = strstr(msg, "run the '");
	char		name[64] = "";
	int			line = 0;

	/*
	 * Redis 6 and 7.0 word it as below, Redis 7.2 and later and Valkey
	 * "ACL failure in script: User u has no permissions to run the 'time'
	 * command"; a refused key is a NOPERM.
	 */
	if (strstr(msg, "NOPERM") == NULL &&
		strstr(msg, "The user executing the script can't") == NULL &&
		strstr(msg, "ACL failure in script") == NULL)
		return;
	if (strstr(msg, " key") != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("the Redis user may not use the keys under ratelimit.key_prefix \"%s\"",
						rl_key_prefix),
				 errdetail_internal("%s", msg),
				 errhint("Give the user ratelimit.redis_username the key pattern ~%s* in its Redis ACL.",
						 rl_key_prefix)));
	if (at != NULL && call != NULL)
	{
		line = atoi(at + strlen("@user_script:"));
		rl_script_line_command(rl_script_sources[call->script].text, line,
							   name, sizeof(name));
	}
	else if (fn_at != NULL && call != NULL)
	{
		/* Under FCALL the line is the library's. */
		line = atoi(fn_at + strlen("@user_function:"));
		rl_script_line_command(rl_library_text, line, name, sizeof(name));
	}
	else if (quote != NULL)
	{
		quote += strlen("run the '");
		for (int i = 0; quote[i] != '\0' && quote[i] != '\'' &&
			 i < (int) sizeof(name) - 1; i++)
		{
			name[i] = pg_toupper((unsigned char) quote[i]);
			name[i + 1] = '\0';
		}
	}
	ereport(ERROR,
			(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 line > 0 && fn_at != NULL ?
			 errmsg("the Redis user may not run %s, which line %d of the function library calls (for %s)",
					name[0] ? name : "a command", line,
					rl_script_sources[call->script].name) :
			 line > 0 ?
			 errmsg("the Redis user may not run %s, which line %d of the %s script calls",
					name[0] ? name : "a command", line,
					rl_script_sources[call->script].name) :
			 errmsg("the Redis user may not run %s", name[0] ? name : "a command"),
			 errdetail_internal("%s", msg),
			 errhint("Grant the user ratelimit.redis_username the commands README's section \"Redis ACL\" lists.")));
}

/* Prepares a call with room for nparams keys and arguments. */
void
rl_script_call_init(RlScriptCall *call, int script, int nkeys, int nparams)
{
	call->script = script;
	call->nkeys = nkeys;
	call->nparams = nparams;
	call->params = palloc(sizeof(char *) * nparams);
	call->paramlen = palloc(sizeof(size_t) * nparams);
}

void
rl_script_call_set(RlScriptCall *call, int i, const char *value)
{
	call->params[i] = value;
	call->paramlen[i] = strlen(value);
}

/* verb what numkeys params...: FCALL, EVALSHA or EVAL. */
static void
rl_build_form(RlCommand *cmd, RlScriptCall *call, const char *verb,
			  const char *what, char *numkeys)
{
	int			argc = call->nparams + 3;

	cmd->argc = argc;
	cmd->argv = palloc(sizeof(char *) * argc);
	cmd->argvlen = palloc(sizeof(size_t) * argc);
	cmd->argv[0] = verb;
	cmd->argv[1] = what;
	snprintf(numkeys, 12, "%d", call->nkeys);
	cmd->argv[2] = numkeys;
	for (int i = 0; i < 3; i++)
		cmd->argvlen[i] = strlen(cmd->argv[i]);
	memcpy(cmd->argv + 3, call->params, sizeof(char *) * call->nparams);
	memcpy(cmd->argvlen + 3, call->paramlen, sizeof(size_t) * call->nparams);
}

/*
 * FCALL function numkeys params..., EVALSHA sha numkeys params..., or EVAL
 * text numkeys params...: what the node takes (see the file's banner).
 * An EVAL is one load, counted.
 */
static void
rl_build_eval(RlCommand *cmd, RlScriptCall *call, RlNode *node, char *numkeys)
{
	const RlScriptSource *src = &rl_script_sources[call->script];
	RlNodeScripts *lost = rl_node_scripts(node);
	uint32		bit = (uint32) 1 << call->script;

	if (rl_node_has_functions(node))
	{
		if (rl_function_names[call->script][0] == '\0')
			snprintf(rl_function_names[call->script],
					 sizeof(rl_function_names[call->script]), "%s%s",
					 RL_FUNCTION_PREFIX, src->name);
		rl_build_form(cmd, call, "FCALL", rl_function_names[call->script],
					  numkeys);
	}
	else if (lost->needs_scripts & bit)
	{
		lost->needs_scripts &= ~bit;
		rl_counters.script_loads++;
		rl_build_form(cmd, call, "EVAL", src->text, numkeys);
	}
	else
		rl_build_form(cmd, call, "EVALSHA", src->sha1, numkeys);
}

/*
 * True when the next pipeline to node must start with FUNCTION LOAD (it
 * answered "Function not found"); then *cmd is that command.  Once per
 * node: the calls behind it in the pipeline find the library.
 */
static bool
rl_library_load(RlNode *node, RlCommand *cmd)
{
	RlNodeScripts *lost = rl_node_scripts(node);

	if (!lost->needs_library || !rl_node_has_functions(node))
		return false;
	lost->needs_library = false;
	rl_counters.script_loads++;
	cmd->argc = 3;
	cmd->argv = rl_load_argv;
	cmd->argvlen = rl_load_len;
	return true;
}

/* No Functions on this node until the settings change: EVAL, then EVALSHA. */
static void
rl_refuse_functions(RlNode *node)
{
	RlNodeScripts *lost = rl_node_scripts(node);

	lost->functions_refused = true;
	lost->needs_library = false;
	lost->needs_scripts = ~(uint32) 0;	/* the first call of each loads it */
}

/*
 * Takes FUNCTION LOAD's reply (NULL: it never came).  The library's name,
 * or "already exists" (another backend loaded it first), is success; the
 * ACL refusing it, or a server without the command, means EVALSHA for
 * that node; Redis unable to serve (MISCONF, OOM, READONLY ...) is copied
 * into unavailable (the calls behind it, which found no function, get the
 * policy's answer); anything else (the server cannot compile or register
 * the library) is a WARNING and EVALSHA for that node, rather than
 * sending the library again on every call.
 */
static void
rl_library_loaded(RlNode *node, redisReply *r, char *unavailable, size_t len)
{
	char		text[512];

	unavailable[0] = '\0';
	if (r == NULL || r->type != REDIS_REPLY_ERROR)
		return;
	if (strstr(r->str, "already exists") != NULL)
		return;
	rl_reply_text(r->str, text, sizeof(text));
	if (rl_reply_unavailable(r))
	{
		strlcpy(unavailable, text, len);
		rl_node_scripts(node)->needs_library = true;
		return;
	}
	if (strncmp(r->str, "NOPERM", 6) == 0 ||
		strncmp(r->str, "ERR unknown command", 19) == 0)
	{
		elog(DEBUG1, "ratelimit: FUNCTION LOAD refused, EVALSHA from now on: %s",
			 text);
		rl_refuse_functions(node);
		return;
	}
	ereport(WARNING,
			(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg("Redis server %s:%d did not load the rate limiter's function library",
					rl_node_host(node), rl_node_port(node)),
			 errdetail("Redis answered: %s", text),
			 errhint("Checks on this server use EVALSHA until the settings change.")));
	rl_refuse_functions(node);
}

/*
 * True when reply r to cmd proves the script call did not run because the
 * node lacks (or refuses) what cmd needs: NOSCRIPT to EVALSHA, "Function
 * not found" to FCALL, or FCALL refused by the ACL or unknown to the
 * server.  What the node lacks is noted, for the next pipeline to it.
 */
static bool
rl_reply_missing(redisReply *r, const RlCommand *cmd,
				 const RlScriptCall *call, RlNode *node)
{
	RlNodeScripts *lost = rl_node_scripts(node);

	if (r == NULL || r->type != REDIS_REPLY_ERROR || call == NULL)
		return false;
	if (strcmp(cmd->argv[0], "EVALSHA") == 0)
	{
		if (strncmp(r->str, "NOSCRIPT", 8) != 0)
			return false;
		lost->needs_scripts |= (uint32) 1 << call->script;
		return true;
	}
	if (strcmp(cmd->argv[0], "FCALL") != 0)
		return false;
	if (strncmp(r->str, "ERR Function not found", 22) == 0)
	{
		lost->needs_library = true;
		return true;
	}
	/*
	 * Redis 6 quotes an unknown command `FCALL`, 7 'FCALL', and then its
	 * first arguments, a key among them: those are not shown.
	 */
	if ((strncmp(r->str, "NOPERM", 6) == 0 && strstr(r->str, "'fcall'") != NULL) ||
		strncmp(r->str, "ERR unknown command", 19) == 0)
	{
		char		text[512];

		rl_reply_text(r->str, text, sizeof(text));
		elog(DEBUG1, "ratelimit: FCALL refused, EVALSHA from now on: %s",
			 text);
		rl_refuse_functions(node);
		return true;
	}
	return false;
}

/*
 * Records what a round trip's replies said of the node: unavailable (the
 * first such reply, or a refused load), the setting it names if it is a
 * configuration error, whether it concerns the node or only some keys
 * (TRYAGAIN); else, if healthy, that the node answered.
 */
static void
rl_record_replies(const char *unavailable, const char *setting,
				  bool node_wide, bool healthy)
{
	/*
	 * NOAUTH or WRONGPASS on a live link (the server's password changed):
	 * drop it, so that the next attempt authenticates with the settings.
	 */
	if (setting != NULL)
		rl_conn_misconfigured(setting, "%s", unavailable);
	else if (unavailable[0] != '\0' && !node_wide)
		rl_conn_slot_failure("%s", unavailable);	/* only those keys */
	else if (unavailable[0] != '\0')
		rl_conn_failure(RL_FAILED_UNAVAILABLE, true, "%s", unavailable);
	else if (healthy)
		rl_conn_succeeded();
}

/*
 * Looks through replies for errors.  A call Redis refused as unavailable
 * (BUSY, OOM, READONLY ...) loses its reply (NULL: the caller gives it the
 * policy's answer) and the failure is recorded once; the other calls keep
 * theirs, since Redis applied them.  A TRYAGAIN (a slot mid-migration,
 * once its retries are spent) is recorded without resting the node: it
 * concerns those keys only.  refused, when not empty, is an unavailable
 * reply met on the way (a FUNCTION LOAD Redis could not do): recorded
 * with the replies' own, so that one round trip counts one failure.
 * Misuse raises an ERROR, after freeing every reply and dropping the
 * link (see below).  A reply's text is
 * kept without the arguments Redis may quote (rl_reply_text).  Returns
 * the number of replies left.
 */
static int
rl_check_replies(redisReply **replies, int n, const RlScriptCall *calls,
				 bool healthy, const char *refused)
{
	char		unavailable[512] = "";
	const char *setting = NULL;
	bool		node_wide = false;	/* anything but TRYAGAIN */
	int			left = 0;

	if (refused != NULL && refused[0] != '\0')
	{
		strlcpy(unavailable, refused, sizeof(unavailable));
		setting = rl_reply_setting(unavailable);
		node_wide = true;
	}

	for (int i = 0; i < n; i++)
	{
		char		msg[512];

		if (replies[i] == NULL)
			continue;			/* lost with a failed resend */
		if (replies[i]->type != REDIS_REPLY_ERROR)
		{
			left++;
			continue;
		}
		rl_reply_text(replies[i]->str, msg, sizeof(msg));
		if (rl_reply_unavailable(replies[i]))
		{
			node_wide |= strncmp(msg, "TRYAGAIN", 8) != 0;
			if (unavailable[0] == '\0')
			{
				strlcpy(unavailable, msg, sizeof(unavailable));
				setting = rl_reply_setting(msg);
			}
			freeReplyObject(replies[i]);
			replies[i] = NULL;
			continue;
		}
		rl_free_replies(replies, n);

		/*
		 * The link goes too.  An error reply has no shape to check, so one
		 * that a faulty peer put in front of Redis's own reply cannot be
		 * told from it; that real reply then comes after the last one read,
		 * possibly after the next call's check for stray bytes
		 * (rl_link_is_stale), and would be taken as that call's answer.
		 * The price is a reconnect on a path that ends in an ERROR anyway.
		 */
		rl_conn_drop();
		/* What was met before the misuse is recorded, not lost with it. */
		rl_record_replies(unavailable, setting, node_wide, false);
		rl_raise_acl_refusal(msg, calls != NULL ? &calls[i] : NULL);
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("Redis rejected a rate limiter command"),
				 errdetail_internal("%s", msg),
				 strncmp(msg, "WRONGTYPE", 9) == 0 ?
				 errhint("Another application wrote to a key under ratelimit.key_prefix.") : 0));
	}
	rl_record_replies(unavailable, setting, node_wide, healthy);
	return left;
}

/*
 * One round trip to the standalone node with the calls listed in which
 * (built for it), FUNCTION LOAD ahead of them if it lost the library;
 * their replies go to replies[which[k]].  False when the round trip
 * failed (recorded): none came.
 */
static bool
rl_standalone_send(RlNode *node, RlCommand *cmds, const int *which, int m,
				   redisReply **replies, TimestampTz deadline,
				   char *unavailable, size_t len)
{
	RlCommand  *send = palloc(sizeof(RlCommand) * (m + 1));
	redisReply **got = palloc(sizeof(redisReply *) * (m + 1));
	bool		load = rl_library_load(node, &send[0]);
	int			first = load ? 1 : 0;

	for (int k = 0; k < m; k++)
		send[first + k] = cmds[which[k]];
	if (!rl_conn_roundtrip(send, first + m, got, deadline, true))
	{
		/* Not known to have run: the next call loads it again. */
		if (load)
			rl_node_scripts(node)->needs_library = true;
		return false;
	}
	unavailable[0] = '\0';
	if (load)
	{
		rl_library_loaded(node, got[0], unavailable, len);
		freeReplyObject(got[0]);
	}
	for (int k = 0; k < m; k++)
	{
		redisReply *r = got[first + k];

		/* Behind a load Redis could not do: the policy answers. */
		if (unavailable[0] != '\0' && r->type == REDIS_REPLY_ERROR &&
			strncmp(r->str, "ERR Function not found", 22) == 0)
		{
			freeReplyObject(r);
			r = NULL;
		}
		replies[which[k]] = r;
	}
	return true;
}

/*
 * Sends again the calls whose replies prove they did not run for want of
 * what the node lost or refuses (rl_reply_missing), once it is back (see
 * the file's banner), in one more round trip; a concurrent flush or a
 * refusal found on the way takes at most RL_RELOAD_PASSES.  False when a
 * round trip failed (the failure is recorded), or when Redis could not
 * load the library (its reply copied into unavailable, for the caller to
 * record with the others): those calls lose their replies (NULL, the
 * policy answers them), and the others keep theirs, since Redis ran them.
 */
static bool
rl_resend_missing(RlNode *node, RlScriptCall *calls, int n,
				  redisReply **replies, RlCommand *cmds, char *numkeys,
				  TimestampTz deadline, char *unavailable, size_t len)
{
	int		   *which = palloc(sizeof(int) * n);

	for (int pass = 0; pass < RL_RELOAD_PASSES; pass++)
	{
		int			missing = 0;

		for (int i = 0; i < n; i++)
		{
			if (rl_reply_missing(replies[i], &cmds[i], &calls[i], node))
				which[missing++] = i;
		}
		if (missing == 0)
			return true;
		for (int k = 0; k < missing; k++)
		{
			int			i = which[k];

			freeReplyObject(replies[i]);
			replies[i] = NULL;
			rl_build_eval(&cmds[i], &calls[i], node, numkeys + 12 * i);
		}
		if (!rl_standalone_send(node, cmds, which, missing, replies, deadline,
								unavailable, len))
			return false;
		if (unavailable[0] != '\0')
			return false;		/* the caller records it */
	}
	return true;
}

/*
 * The node each command of the last rl_run_scripts went to last (NULL in
 * standalone mode): a policy answer in closed mode tells the wait of the
 * key's own node, not of whichever node the call touched last.
 */
static RlNode **rl_reply_node = NULL;
static int	rl_reply_nodes = 0;

/*
 * Sleeps ms (or until the deadline), serving interrupts: the pause before
 * a command is sent again after TRYAGAIN.
 */
static void
rl_cluster_pause(long ms, TimestampTz deadline)
{
	long		left = TimestampDifferenceMilliseconds(GetCurrentTimestamp(),
													   deadline);

	if (Min(ms, left) <= 0)
		return;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 Min(ms, left), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	CHECK_FOR_INTERRUPTS();
}

/*
 * True when the reply proves the command did not run and tells where to
 * send it again (*to; NULL: route it afresh, *asking: prefix ASKING).
 * asked says whether it went with ASKING: sent again to the same node
 * (TRYAGAIN, a lost script), it goes with ASKING again, or an importing
 * node would only send it back with MOVED.  A redirect to a node this
 * backend has no room for cannot be followed: an outage for that key,
 * recorded, its reply dropped (*rp NULL: the policy answers it).
 * The cluster's own state changes here: a MOVED fixes the slot's entry.
 */
static bool
rl_cluster_resend(redisReply **rp, RlNode *node, RlCommand *cmd,
				  RlScriptCall *call, char *numkeys, int *tryagain,
				  RlNode **to, bool asked, bool *asking, bool *pause)
{
	redisReply *r = *rp;
	int			slot;
	RlNode	   *target;

	if (r->type != REDIS_REPLY_ERROR)
		return false;
	switch (rl_cluster_redirect(r->str, node, &slot, &target))
	{
		case RL_REDIRECT_NO_ROOM:
			freeReplyObject(r);
			*rp = NULL;
			rl_cluster_mark_stale();
			rl_conn_set_current(node);
			rl_conn_slot_failure("cannot follow the redirect of hash slot %d: this backend already knows %d cluster nodes",
								 slot, RL_MAX_NODES);
			return false;
		case RL_REDIRECT_MOVED:
			rl_counters.redirects++;
			elog(DEBUG1, "ratelimit: MOVED hash slot %d to %s:%d",
				 slot, rl_node_host(target), rl_node_port(target));
			rl_cluster_moved(slot, target);
			*to = target;
			return true;
		case RL_REDIRECT_ASK:
			rl_counters.redirects++;
			elog(DEBUG1, "ratelimit: ASK hash slot %d at %s:%d",
				 slot, rl_node_host(target), rl_node_port(target));
			*to = target;
			*asking = true;
			return true;
		case RL_REDIRECT_NONE:
			break;
	}
	if (strncmp(r->str, "TRYAGAIN", 8) == 0 && *tryagain < 3)
	{
		(*tryagain)++;
		*to = node;
		*asking = asked;
		*pause = true;
		return true;
	}
	if (rl_reply_missing(r, cmd, call, node))
	{
		/* Rebuilt for the node, the loss made good, when next sent. */
		*to = node;
		*asking = asked;
		return true;
	}
	if (strncmp(r->str, "READONLY", 8) == 0)
	{
		/* A master demoted before the map said so. */
		rl_cluster_mark_stale();
		*to = NULL;
		return true;
	}
	return false;
}

/*
 * Runs n commands against a Redis Cluster, each on the master of its
 * key's slot (the key is argument keyarg), one node at a time, following
 * redirects (see the file's banner).  calls, when not NULL, are the script
 * calls behind cmds (for NOSCRIPT and the ACL messages).  replies[i] is
 * the reply of command i, or NULL for the policy's answer; false when
 * none has a reply.
 */
static bool
rl_run_cluster(RlCommand *cmds, RlScriptCall *calls, char *numkeys, int n,
			   redisReply **replies, int keyarg)
{
	static const char *asking_argv[1] = {"ASKING"};
	static size_t asking_len[1] = {6};
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													   rl_command_timeout);
	int		   *slot = palloc(sizeof(int) * n);
	RlNode	  **target = palloc0(sizeof(RlNode *) * n);
	bool	   *asking = palloc0(sizeof(bool) * n);
	bool	   *pending = palloc(sizeof(bool) * n);
	int		   *tryagain = palloc0(sizeof(int) * n);
	int		   *hops = palloc0(sizeof(int) * n);
	int		   *idx = palloc(sizeof(int) * n);
	int		   *doneidx = palloc(sizeof(int) * n);
	int			nslots = 2 * n + RL_MAX_NODES + 1;	/* ASKING, FUNCTION LOAD */
	RlCommand  *batch = palloc(sizeof(RlCommand) * nslots);
	redisReply **volatile got = palloc0(sizeof(redisReply *) * nslots);
	redisReply **volatile done = palloc0(sizeof(redisReply *) * n);
	RlScriptCall *donecalls = palloc(sizeof(RlScriptCall) * n);
	bool		any = false;

	rl_reply_node = palloc0(sizeof(RlNode *) * n);
	rl_reply_nodes = n;

	/*
	 * A command's keys share one slot: a limiter's keys share its tag, and
	 * the statement trigger sends one script per slot (rl_trigger_slots.c).
	 * Any other would get CROSSSLOT, an ERROR like any misuse.
	 */
	for (int i = 0; i < n; i++)
	{
		replies[i] = NULL;
		pending[i] = true;
		slot[i] = rl_key_slot(cmds[i].argv[keyarg], cmds[i].argvlen[keyarg]);
	}

	PG_TRY();
	{
		for (;;)
		{
			RlNode	   *nodes[RL_MAX_NODES + 1];
			int			nbatch[RL_MAX_NODES + 1];	/* commands sent, ASKING too */
			int			start[RL_MAX_NODES + 1];	/* first slot in batch/got */
			bool		sent[RL_MAX_NODES + 1];
			bool		load[RL_MAX_NODES + 1]; /* FUNCTION LOAD first */
			int			first[RL_MAX_NODES + 1];	/* the node's first in idx */
			int			count[RL_MAX_NODES + 1];	/* and how many */
			char		loadfail[512];
			int			nn = 0;
			int			nb = 0;
			int			m = 0;
			bool		pause = false;

			/* Route what has nowhere to go yet; no node: the policy. */
			for (int i = 0; i < n; i++)
			{
				if (!pending[i] || target[i] != NULL)
					continue;
				target[i] = rl_cluster_route(slot[i], deadline);
				if (target[i] == NULL)
					pending[i] = false;
				else if (hops[i] == 0)
				{
					/*
					 * The slot, not the key: a trigger's key holds column
					 * values its role may not be allowed to read.
					 */
					elog(DEBUG1, "ratelimit: hash slot %d goes to %s:%d",
						 slot[i], rl_node_host(target[i]),
						 rl_node_port(target[i]));
				}
			}

			/*
			 * One pipeline per node, in the order of each node's first
			 * command; idx lists the commands node by node (the node's
			 * are idx[first[k]] .. idx[first[k] + count[k] - 1]).
			 */
			for (int i = 0; i < n; i++)
			{
				RlNode	   *node;

				if (!pending[i] || target[i] == NULL)
					continue;
				/* Nodes let go of mid-call may add to the known ones. */
				if (nn == RL_MAX_NODES + 1)
					break;		/* the rest go in the next round */
				node = target[i];
				nodes[nn] = node;
				first[nn] = m;
				for (int k = i; k < n; k++)
				{
					if (!pending[k] || target[k] != node)
						continue;
					rl_reply_node[k] = node;
					idx[m++] = k;
					pending[k] = false;
					target[k] = NULL;
				}
				count[nn] = m - first[nn];
				nn++;
			}
			if (nn == 0)
				break;

			/*
			 * Every node's pipeline is written before any reply is waited
			 * for, so the masters work at once and a slow one delays only
			 * its own keys (within the one deadline).  Each node is
			 * connected just before its pipeline is built (so one slow to
			 * connect holds back only the nodes after it, as before): the
			 * script calls are built for what it has (FCALL or EVALSHA),
			 * after FUNCTION LOAD if it lost the library.  A command not
			 * sent, or whose reply never came, is never sent again: the
			 * policy answers it.
			 */
			for (int k = 0; k < nn; k++)
			{
				RlNode	   *node = nodes[k];
				bool		ready = rl_node_ready(node);

				start[k] = nb;
				nbatch[k] = 0;
				load[k] = ready && calls != NULL &&
					rl_library_load(node, &batch[nb]);
				if (load[k])
				{
					nb++;
					nbatch[k]++;
				}
				for (int q = first[k]; q < first[k] + count[k]; q++)
				{
					int			i = idx[q];

					if (ready && calls != NULL)
						rl_build_eval(&cmds[i], &calls[i], node,
									  numkeys + 12 * i);
					if (asking[i])
					{
						batch[nb].argc = 1;
						batch[nb].argv = asking_argv;
						batch[nb++].argvlen = asking_len;
						nbatch[k]++;
					}
					batch[nb++] = cmds[i];
					nbatch[k]++;
				}
				sent[k] = ready && rl_node_send(node, batch + start[k], nbatch[k]);
			}
			rl_conn_wait_work();
			rl_nodes_receive(nodes, nn, sent, got, start, nbatch, deadline);

			m = 0;
			for (int k = 0; k < nn; k++)
			{
				RlNode	   *node = nodes[k];
				int			j = start[k];
				int			nd = 0;

				loadfail[0] = '\0';
				if (load[k] && sent[k])
				{
					rl_library_loaded(node, got[j], loadfail, sizeof(loadfail));
					freeReplyObject(got[j]);
					got[j++] = NULL;
				}
				else if (load[k])
					rl_node_scripts(node)->needs_library = true;	/* not sent */
				for (int c = load[k] ? 1 : 0; c < nbatch[k]; m++)
				{
					int			i = idx[m];
					bool		asked = asking[i];
					redisReply *r;

					c += asking[i] ? 2 : 1;
					if (!sent[k])
					{
						asking[i] = false;
						continue;
					}
					if (asking[i])
					{
						freeReplyObject(got[j]);
						got[j++] = NULL;
						asking[i] = false;
					}
					r = got[j];
					got[j++] = NULL;
					/* Behind a load Redis could not do: the policy. */
					if (loadfail[0] != '\0' && r != NULL &&
						r->type == REDIS_REPLY_ERROR &&
						strncmp(r->str, "ERR Function not found", 22) == 0)
					{
						freeReplyObject(r);
						r = NULL;
					}
					if (r != NULL && rl_cluster_resend(&r, node, &cmds[i],
										  calls != NULL ? &calls[i] : NULL,
										  numkeys != NULL ? numkeys + 12 * i : NULL,
										  &tryagain[i], &target[i], asked,
										  &asking[i], &pause))
					{
						freeReplyObject(r);
						if (++hops[i] <= RL_CLUSTER_MAX_HOPS)
						{
							pending[i] = true;
							continue;
						}

						/*
						 * The bound concerns this key's slot, not the node:
						 * the key gets the policy answer, the reply was read
						 * (the link is in step and stays), and the node goes
						 * on serving its other keys.
						 */
						target[i] = NULL;
						asking[i] = false;
						rl_conn_set_current(node);
						rl_conn_slot_failure("too many cluster redirects for hash slot %d",
											 slot[i]);
						continue;
					}
					done[nd] = r;
					if (calls != NULL)
						donecalls[nd] = calls[i];
					doneidx[nd++] = i;
				}
				if (!sent[k])
					continue;

				/* Unavailable: NULL (the policy); misuse: an ERROR. */
				rl_conn_set_current(node);
				/* A demoted master: the next call fetches the map. */
				if (strncmp(loadfail, "READONLY", 8) == 0)
					rl_cluster_mark_stale();
				(void) rl_check_replies(done, nd, calls != NULL ? donecalls : NULL,
										true, loadfail);
				for (int d = 0; d < nd; d++)
				{
					replies[doneidx[d]] = done[d];
					any |= done[d] != NULL;
					done[d] = NULL;
				}
			}
			if (pause)
				rl_cluster_pause(10, deadline);
		}
	}
	PG_CATCH();
	{
		rl_free_replies(got, nslots);
		rl_free_replies(done, n);
		rl_free_replies(replies, n);
		rl_conn_discard_busy();
		PG_RE_THROW();
	}
	PG_END_TRY();
	return any;
}

/*
 * Runs n script calls in one round trip (plus one more if Redis had lost
 * some scripts).  False means Redis is unavailable for every call and the
 * caller should give the policy answer.  Otherwise replies[] holds one
 * array reply per call, for the caller to free, or NULL for a call Redis
 * refused as unavailable (rl_redis.c leaves it unanswered).
 */
bool
rl_run_scripts(RlScriptCall *calls, int n, redisReply **replies)
{
	RlCommand  *cmds;
	char	   *numkeys;
	RlNode	   *node;
	int		   *which;
	char		unavailable[512];
	TimestampTz deadline;
	bool		ok = false;
	int			left = 0;

	rl_reply_node = NULL;
	rl_reply_nodes = 0;
	if (!rl_conn_begin())
		return false;
	cmds = palloc(sizeof(RlCommand) * n);
	numkeys = palloc(12 * n);
	if (rl_redis_mode == RL_MODE_CLUSTER)
	{
		/* Built for their nodes once routed; the key is argument 3. */
		for (int i = 0; i < n; i++)
			rl_build_form(&cmds[i], &calls[i], "EVALSHA",
						  rl_script_sources[calls[i].script].sha1,
						  numkeys + 12 * i);
		return rl_run_cluster(cmds, calls, numkeys, n, replies, 3);
	}

	node = rl_standalone_node();
	if (!rl_node_ready(node))
		return false;
	which = palloc(sizeof(int) * n);
	for (int i = 0; i < n; i++)
	{
		rl_build_eval(&cmds[i], &calls[i], node, numkeys + 12 * i);
		which[i] = i;
	}
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   rl_command_timeout);
	if (!rl_standalone_send(node, cmds, which, n, replies, deadline,
							unavailable, sizeof(unavailable)))
		return false;
	/*
	 * The replies are hiredis's (malloc): an ERROR from here on (a cancel,
	 * out of memory) must free them.  A load Redis refused as unavailable
	 * ran nothing: the calls behind it get the policy's answer.
	 */
	PG_TRY();
	{
		ok = unavailable[0] == '\0' &&
			rl_resend_missing(node, calls, n, replies, cmds, numkeys,
							  deadline, unavailable, sizeof(unavailable));
		left = rl_check_replies(replies, n, calls, ok, unavailable);
	}
	PG_CATCH();
	{
		rl_free_replies(replies, n);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return left > 0;
}

/* Runs one plain command (rl_reset's DEL) under the same rules. */
bool
rl_run_command(RlCommand *cmd, redisReply **reply)
{
	TimestampTz deadline;

	rl_reply_node = NULL;
	rl_reply_nodes = 0;

	if (!rl_conn_begin())
		return false;
	if (rl_redis_mode == RL_MODE_CLUSTER)
		return rl_run_cluster(cmd, NULL, NULL, 1, reply, 1);
	if (!rl_node_ready(rl_standalone_node()))
		return false;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   rl_command_timeout);
	if (!rl_conn_roundtrip(cmd, 1, reply, deadline, true))
		return false;
	return rl_check_replies(reply, 1, NULL, true, NULL) > 0;
}

/*
 * The node call i of the n of the last rl_run_scripts went to, or NULL
 * (standalone, or not known): the engine gives that call the policy
 * answer with that node's wait.
 */
RlNode *
rl_scripts_call_node(int i, int n)
{
	return rl_reply_nodes == n ? rl_reply_node[i] : NULL;
}
