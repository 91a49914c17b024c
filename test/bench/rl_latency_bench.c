/*-------------------------------------------------------------------------
 *
 * rl_latency_bench.c
 *	  The latency of one SQL statement, call by call, from several clients.
 *
 * Each of CLIENTS processes opens its own libpq connection, prepares the
 * statement and runs it one call after the other for SECONDS, timing each
 * call with the monotonic clock.  The parent gathers every call's time
 * and prints p50, p99 and p99.9 in milliseconds.
 *
 * pgbench's per-transaction log (-l) would do, but PostgreSQL 15's
 * pgbench reads its clock lazily and logs 0 us for many transactions once
 * several clients share a thread or a loop turn (70 % of them at -c 8
 * here), which makes its percentiles meaningless.
 *
 * usage: rl_latency_bench CONNINFO CLIENTS SECONDS SQL
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  test/bench/rl_latency_bench.c
 *
 *-------------------------------------------------------------------------
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>

#include <libpq-fe.h>

static double
rl_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int
rl_cmp(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/* One client: writes each call's seconds, as doubles, to fd. */
static int
rl_client(const char *conninfo, double seconds, const char *sql, int fd)
{
	PGconn	   *conn = PQconnectdb(conninfo);
	PGresult   *res;
	double		end;

	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "connect: %s", PQerrorMessage(conn));
		return 1;
	}
	res = PQprepare(conn, "q", sql, 0, NULL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		fprintf(stderr, "prepare: %s", PQerrorMessage(conn));
		return 1;
	}
	PQclear(res);
	end = rl_now() + seconds;
	while (rl_now() < end)
	{
		double		t0 = rl_now();
		double		took;

		res = PQexecPrepared(conn, "q", 0, NULL, NULL, NULL, 0);
		took = rl_now() - t0;
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			fprintf(stderr, "query: %s", PQerrorMessage(conn));
			return 1;
		}
		PQclear(res);
		if (write(fd, &took, sizeof(took)) != sizeof(took))
			return 1;
	}
	PQfinish(conn);
	return 0;
}

int
main(int argc, char **argv)
{
	int			clients;
	double		seconds;
	FILE	   *all = tmpfile();
	double	   *v;
	long		n;
	const double q[] = {0.5, 0.99, 0.999};

	if (argc != 5 || all == NULL)
	{
		fprintf(stderr, "usage: %s CONNINFO CLIENTS SECONDS SQL\n", argv[0]);
		return 2;
	}
	clients = atoi(argv[2]);
	seconds = atof(argv[3]);
	for (int i = 0; i < clients; i++)
	{
		if (fork() == 0)
			_exit(rl_client(argv[1], seconds, argv[4], fileno(all)));
	}
	for (int i = 0; i < clients; i++)
	{
		int			status;

		if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
			return 1;
	}
	n = ftell(all) / (long) sizeof(double);
	if (n <= 0)
		return 1;
	v = malloc(sizeof(double) * n);
	rewind(all);
	if (v == NULL || fread(v, sizeof(double), n, all) != (size_t) n)
		return 1;
	qsort(v, n, sizeof(double), rl_cmp);
	for (int i = 0; i < 3; i++)
	{
		long		k = (long) (q[i] * n + 0.999999) - 1;

		if (k < 0)
			k = 0;
		if (k >= n)
			k = n - 1;
		printf("%.3f%s", v[k] * 1000, i < 2 ? " " : "\n");
	}
	return 0;
}
