/*-------------------------------------------------------------------------
 *
 * rl_guc.h
 *	  Every ratelimit.* setting, and whether the library was preloaded.
 *
 * The settings are defined in rl_guc.c and declared here only, so that
 * any layer reads them without reaching into another: a store reads its
 * endpoint, the policy failure_mode, the engine enforce.
 *
 * Copyright (c) 2026, ratelimit developers
 *
 * IDENTIFICATION
 *	  src/rl_guc.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RL_GUC_H
#define RL_GUC_H

#include "rl_types.h"

extern int	rl_redis_mode;
extern char *rl_redis_nodes;
extern char *rl_redis_host;
extern int	rl_redis_port;
extern char *rl_redis_socket;
extern int	rl_redis_db;
extern char *rl_redis_username;
extern char *rl_redis_password;
extern char *rl_redis_password_file;
extern bool rl_redis_tls;
extern char *rl_redis_tls_ca_file;
extern char *rl_redis_tls_cert_file;
extern char *rl_redis_tls_key_file;
extern char *rl_redis_tls_server_name;
extern int	rl_connect_timeout;
extern int	rl_command_timeout;
extern int	rl_failure_mode;
extern int	rl_retry_interval;
extern char *rl_key_prefix;
extern bool rl_isolate_databases;
extern bool rl_enforce;
extern bool rl_refund_on_abort;
extern bool rl_stats_enabled;
extern int	rl_stats_max_limiters;
extern int	rl_max_policies;
extern int	rl_trusted_proxy_hops;
extern int	rl_ipv6_prefix;
extern double rl_test_clock_ms;
extern char *rl_sentinel_master;
extern char *rl_sentinel_username;
extern char *rl_sentinel_password;
extern char *rl_sentinel_password_file;
extern int	rl_sentinel_check_interval;
extern bool rl_deny_cache;
extern int	rl_engine;
extern int	rl_local_max_entries;
extern int	rl_local_log_entries;

/*
 * Counts the changes to the settings that name the endpoint or its
 * credentials: the Redis store reconnects when it moved.
 */
extern uint64 rl_settings_generation;
extern void rl_define_settings(void);

/* The seed list of ratelimit.redis_nodes, parsed (-1: *why says what is wrong). */
extern int	rl_parse_nodes(const char *list, char **hosts, int *ports, int max,
						   char *why, size_t whysize);

/*
 * The local store's shape, which its settings are bounded by:
 * the table's partitions, one lock each (a key's hash picks its
 * partition), and the members per block of the sliding logs' shared pool
 * (ratelimit.local_log_entries of them in all), chained per log: a log
 * grows and shrinks a block at a time with its limit and traffic.
 */
#define RL_LOCAL_PARTITIONS		128
#define RL_LOCAL_LOG_BLOCK		32

/* Set by _PG_init: the library was loaded by shared_preload_libraries. */
extern bool rl_preloaded;
extern void rl_require_preload(void);

#endif							/* RL_GUC_H */
