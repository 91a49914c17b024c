/*-------------------------------------------------------------------------
 *
 * rl_hiredis_bench.c
 *	  The ceiling a hiredis client can reach with ratelimit's own script.
 *
 * Runs the token bucket script (the very text and SHA1 the extension
 * embeds, from src/redis/rl_scripts_gen.h) with EVALSHA over one blocking
 * hiredis connection, one call at a time and pipelined, and prints calls
 * per second.  The benchmark compares rl_allow with these numbers: the
 * difference is what PostgreSQL and the extension add.
 *
 * usage: rl_hiredis_bench PORT|SOCKET SECONDS DEPTH KEYS
 *	  A path connects to a Unix socket; DEPTH 1 = synchronous; KEYS 1 =
 *	  one hot key, else random keys.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  test/bench/rl_hiredis_bench.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <hiredis/hiredis.h>

typedef struct RlScriptSource
{
	const char *name;
	const char *sha1;
	const char *text;
} RlScriptSource;

#include "rl_scripts_gen.h"

static double
rl_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int
main(int argc, char **argv)
{
	const RlScriptSource *tb = NULL;
	redisContext *c;
	redisReply *r;
	int			port,
				depth,
				keys;
	double		seconds,
				start,
				elapsed;
	long		calls = 0;

	if (argc != 5)
	{
		fprintf(stderr, "usage: %s PORT|SOCKET SECONDS DEPTH KEYS\n", argv[0]);
		return 2;
	}
	port = strchr(argv[1], '/') ? 0 : atoi(argv[1]);
	seconds = atof(argv[2]);
	depth = atoi(argv[3]);
	keys = atoi(argv[4]);

	for (size_t i = 0; i < sizeof(rl_script_sources) / sizeof(rl_script_sources[0]); i++)
		if (strcmp(rl_script_sources[i].name, "token_bucket") == 0)
			tb = &rl_script_sources[i];

	c = port ? redisConnect("127.0.0.1", port) : redisConnectUnix(argv[1]);
	if (c == NULL || c->err)
	{
		fprintf(stderr, "connect failed\n");
		return 1;
	}
	r = redisCommand(c, "SCRIPT LOAD %s", tb->text);
	if (r == NULL || r->type != REDIS_REPLY_STRING || strcmp(r->str, tb->sha1) != 0)
	{
		fprintf(stderr, "SCRIPT LOAD did not return the embedded SHA1\n");
		return 1;
	}
	freeReplyObject(r);

	srandom(42);
	start = rl_now();
	do
	{
		for (int i = 0; i < depth; i++)
		{
			char		key[64];

			snprintf(key, sizeof(key), "rl:{bench:%ld}:token_bucket",
					 keys > 1 ? random() % keys : 0);
			redisAppendCommand(c, "EVALSHA %s 1 %s 100 1000000 1 0", tb->sha1, key);
		}
		for (int i = 0; i < depth; i++)
		{
			if (redisGetReply(c, (void **) &r) != REDIS_OK ||
				r->type != REDIS_REPLY_ARRAY)
			{
				fprintf(stderr, "bad reply\n");
				return 1;
			}
			freeReplyObject(r);
		}
		calls += depth;
		elapsed = rl_now() - start;
	} while (elapsed < seconds);

	printf("%.0f\n", calls / elapsed);
	redisFree(c);
	return 0;
}
