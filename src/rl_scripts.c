/*-------------------------------------------------------------------------
 *
 * rl_scripts.c
 *	  Running the embedded Lua scripts with EVALSHA.
 *
 * The scripts are compiled into the library (rl_scripts_gen.h, made from
 * lua/ at build time) together with their SHA1s, so a call is a single
 * EVALSHA and never a per-call SCRIPT LOAD.  Redis forgets scripts on
 * restart, fail-over and SCRIPT FLUSH; a NOSCRIPT reply means the script
 * did not run, so exactly those calls are sent once more as EVAL, which
 * also puts the script back in the cache.
 *
 * Replies are sorted into two classes.  Unavailable (BUSY, LOADING, OOM,
 * READONLY, NOREPLICAS, MISCONF ...) is Redis's state, answered by the
 * failure policy, call by call: in a pipelined batch the calls Redis did
 * run keep their answers.
 * Misuse (WRONGTYPE, NOPERM, script errors, odd replies) is an ERROR: a
 * limiter that admits everything when its keys are wrong would hide the
 * mistake.  A NOPERM names the command the Redis user lacks.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_scripts.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/timestamp.h"

#include "rl_scripts.h"

typedef struct RlScriptSource
{
	const char *name;
	const char *sha1;
	const char *text;
} RlScriptSource;

#include "rl_scripts_gen.h"

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
	const char *quote = strstr(msg, "run the '");
	char		name[64] = "";
	int			line = 0;

	/* Redis 6 and 7.0 word it as below; later versions quote a NOPERM. */
	if (strstr(msg, "NOPERM") == NULL &&
		strstr(msg, "The user executing the script can't") == NULL)
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

/* EVALSHA sha numkeys params..., or EVAL text numkeys params... */
static void
rl_build_eval(RlCommand *cmd, RlScriptCall *call, bool by_text, char *numkeys)
{
	const RlScriptSource *src = &rl_script_sources[call->script];
	int			argc = call->nparams + 3;

	cmd->argc = argc;
	cmd->argv = palloc(sizeof(char *) * argc);
	cmd->argvlen = palloc(sizeof(size_t) * argc);
	cmd->argv[0] = by_text ? "EVAL" : "EVALSHA";
	cmd->argv[1] = by_text ? src->text : src->sha1;
	snprintf(numkeys, 12, "%d", call->nkeys);
	cmd->argv[2] = numkeys;
	for (int i = 0; i < 3; i++)
		cmd->argvlen[i] = strlen(cmd->argv[i]);
	memcpy(cmd->argv + 3, call->params, sizeof(char *) * call->nparams);
	memcpy(cmd->argvlen + 3, call->paramlen, sizeof(size_t) * call->nparams);
}

/*
 * Looks through replies for errors.  A call Redis refused as unavailable
 * (BUSY, OOM, READONLY ...) loses its reply (NULL: the caller gives it the
 * policy's answer) and the failure is recorded once; the other calls keep
 * theirs, since Redis applied them.  Misuse raises an ERROR, after freeing
 * every reply.  Returns the number of replies left.
 */
static int
rl_check_replies(redisReply **replies, int n, const RlScriptCall *calls,
				 bool healthy)
{
	char		unavailable[512] = "";
	const char *setting = NULL;
	int			left = 0;

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
		strlcpy(msg, replies[i]->str, sizeof(msg));
		if (rl_reply_unavailable(replies[i]))
		{
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
		rl_raise_acl_refusal(msg, calls != NULL ? &calls[i] : NULL);
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("Redis rejected a rate limiter command"),
				 errdetail_internal("%s", msg),
				 strncmp(msg, "WRONGTYPE", 9) == 0 ?
				 errhint("Another application wrote to a key under ratelimit.key_prefix.") : 0));
	}
	/*
	 * NOAUTH or WRONGPASS on a live link (the server's password changed):
	 * drop it, so that the next attempt authenticates with the settings.
	 */
	if (setting != NULL)
		rl_conn_misconfigured(setting, "%s", unavailable);
	else if (unavailable[0] != '\0')
		rl_conn_failure(true, "%s", unavailable);
	else if (healthy)
		rl_conn_succeeded();
	return left;
}

/*
 * Resends as EVAL the calls whose scripts Redis no longer knows (NOSCRIPT:
 * they did not run), in one more round trip.  False when that round trip
 * failed (the failure is recorded): those calls lose their replies (NULL,
 * the policy answers them), and the others keep theirs, since Redis ran
 * them.
 */
static bool
rl_resend_missing(RlScriptCall *calls, int n, redisReply **replies,
				  RlCommand *cmds, char *numkeys, TimestampTz deadline)
{
	redisReply **again;
	int			missing = 0;
	int			j = 0;

	for (int i = 0; i < n; i++)
	{
		if (replies[i]->type == REDIS_REPLY_ERROR &&
			strncmp(replies[i]->str, "NOSCRIPT", 8) == 0)
			rl_build_eval(&cmds[missing++], &calls[i], true, numkeys + 12 * i);
	}
	if (missing == 0)
		return true;

	again = palloc(sizeof(redisReply *) * missing);
	rl_counters.script_loads += missing;
	if (!rl_conn_roundtrip(cmds, missing, again, deadline, true))
	{
		for (int i = 0; i < n; i++)
		{
			if (replies[i]->type == REDIS_REPLY_ERROR &&
				strncmp(replies[i]->str, "NOSCRIPT", 8) == 0)
			{
				freeReplyObject(replies[i]);
				replies[i] = NULL;
			}
		}
		return false;
	}
	for (int i = 0; i < n; i++)
	{
		if (replies[i]->type == REDIS_REPLY_ERROR &&
			strncmp(replies[i]->str, "NOSCRIPT", 8) == 0)
		{
			freeReplyObject(replies[i]);
			replies[i] = again[j++];
		}
	}
	return true;
}

/*
 * Runs n script calls in one round trip (plus one more if Redis had lost
 * some scripts).  False means Redis is unavailable for every call and the
 * caller should give the policy answer.  Otherwise replies[] holds one
 * array reply per call, for the caller to free, or NULL for a call Redis
 * refused as unavailable (rl_take_answers gives it the policy answer).
 */
bool
rl_run_scripts(RlScriptCall *calls, int n, redisReply **replies)
{
	RlCommand  *cmds;
	char	   *numkeys;
	TimestampTz deadline;
	bool		ok = false;
	int			left = 0;

	if (!rl_conn_ready())
		return false;

	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   rl_command_timeout);
	cmds = palloc(sizeof(RlCommand) * n);
	numkeys = palloc(12 * n);
	for (int i = 0; i < n; i++)
		rl_build_eval(&cmds[i], &calls[i], false, numkeys + 12 * i);
	if (!rl_conn_roundtrip(cmds, n, replies, deadline, true))
		return false;

	/*
	 * The replies are hiredis's (malloc): an ERROR from here on (a cancel,
	 * out of memory) must free them.
	 */
	PG_TRY();
	{
		ok = rl_resend_missing(calls, n, replies, cmds, numkeys, deadline);
		left = rl_check_replies(replies, n, calls, ok);
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

	if (!rl_conn_ready())
		return false;
	deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
										   rl_command_timeout);
	if (!rl_conn_roundtrip(cmd, 1, reply, deadline, true))
		return false;
	return rl_check_replies(reply, 1, NULL, true) > 0;
}

/* A script's reply {allowed, remaining, retry_after_ms, reset_after_ms}. */
static bool
rl_reply_answer(redisReply *reply, RlAnswer *answer)
{
	if (reply->type != REDIS_REPLY_ARRAY || reply->elements < 4)
		return false;
	for (int i = 0; i < 4; i++)
	{
		if (reply->element[i]->type != REDIS_REPLY_INTEGER)
			return false;
	}
	answer->known = true;
	answer->allowed = reply->element[0]->integer != 0;
	answer->remaining = reply->element[1]->integer;
	answer->retry_after_ms = reply->element[2]->integer;
	answer->reset_after_ms = reply->element[3]->integer;
	return true;
}

/*
 * Turns n script replies into answers and frees them; a missing reply
 * (Redis refused that call as unavailable) gets the policy's answer, and a
 * reply of the wrong shape (a foreign script under our SHA, say) is an
 * ERROR, and the link is dropped: what comes next on it cannot be trusted.
 */
void
rl_take_answers(redisReply **replies, int n, RlAnswer *answers)
{
	bool		ok = true;

	for (int i = 0; i < n && ok; i++)
	{
		answers[i].known = false;
		if (replies[i] != NULL)
			ok = rl_reply_answer(replies[i], &answers[i]);
	}
	rl_free_replies(replies, n);
	if (!ok)
	{
		rl_conn_drop();
		ereport(ERROR,
				(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
				 errmsg("unexpected reply from a rate limiter script"),
				 errdetail("The connection to Redis was closed; the next call opens a new one.")));
	}
	/* Only now, with nothing left to free: under "error" this raises. */
	for (int i = 0; i < n; i++)
	{
		if (!answers[i].known)
			rl_policy_answer(&answers[i]);
	}
}
