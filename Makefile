# Makefile
#
# PGXS build for the ratelimit extension.  The Lua scripts in lua/ are
# embedded into the shared library at build time (src/redis/rl_scripts_gen.h);
# nothing under lua/ is read at run time.

EXTENSION = ratelimit
EXTVERSION = 0.6.0

MODULE_big = ratelimit
OBJS = \
	src/ratelimit.o \
	src/rl_guc.o \
	src/rl_args.o \
	src/rl_cache.o \
	src/rl_stats.o \
	src/rl_stats_limiters.o \
	src/rl_stats_policies.o \
	src/rl_policies.o \
	src/redis/rl_node.o \
	src/redis/rl_conn.o \
	src/redis/rl_connect.o \
	src/redis/rl_roundtrip.o \
	src/redis/rl_link.o \
	src/redis/rl_cluster.o \
	src/redis/rl_sentinel.o \
	src/redis/rl_scripts.o \
	src/redis/rl_redis.o \
	src/redis/rl_probe.o \
	src/rl_engine.o \
	src/rl_policy.o \
	src/rl_batch.o \
	src/rl_layered.o \
	src/trigger/rl_trigger.o \
	src/trigger/rl_trigger_statement.o \
	src/rl_engine_spread.o \
	src/trigger/rl_groups.o \
	src/rl_postgrest.o \
	src/local/rl_local_store.o \
	src/local/rl_local_algo.o \
	src/local/rl_local_log.o \
	src/local/rl_local_run.o \
	src/rl_acquire.o \
	src/rl_refund.o \
	src/rl_hold.o

DATA = sql/ratelimit--0.1.0.sql sql/ratelimit--0.1.0--0.2.0.sql \
	sql/ratelimit--0.2.0.sql sql/ratelimit--0.2.0--0.3.0.sql \
	sql/ratelimit--0.3.0.sql sql/ratelimit--0.3.0--0.4.0.sql \
	sql/ratelimit--0.4.0.sql sql/ratelimit--0.4.0--0.5.0.sql \
	sql/ratelimit--0.5.0.sql sql/ratelimit--0.5.0--0.6.0.sql \
	sql/ratelimit--$(EXTVERSION).sql
PGFILEDESC = "ratelimit - distributed rate limiting over Redis"

# The manual (doc/*.md), installed under $(pg_config --docdir)/extension/ratelimit
# (docmoduledir, set after the PGXS include): in a directory of its own,
# since names such as security.md would clash with other extensions' docs.
DOCS = $(wildcard doc/*.md)

PG_CPPFLAGS = -Isrc
SHLIB_LINK += -lhiredis -lssl -lcrypto

# pg_regress suites; each needs a Redis server reachable through the
# settings in the server's configuration (test/check.sh provides both).
REGRESS = basic algorithms burst acquire errors settings local shadow stats batch layered triggers postgrest examples policies policy_changes ping refunds concurrency
REGRESS_OPTS = --load-extension=ratelimit

LUA_SCRIPTS = $(wildcard lua/*.lua)
EXTRA_CLEAN = src/redis/rl_scripts_gen.h

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

docmoduledir = extension/ratelimit

# PGXS's uninstall names each of DOCS with its doc/ prefix under the
# install directory, where they were installed without it.
uninstall: uninstall-ratelimit-docs
uninstall-ratelimit-docs:
	rm -f $(addprefix '$(DESTDIR)$(docdir)/$(docmoduledir)'/, $(notdir $(DOCS)))
	-rmdir '$(DESTDIR)$(docdir)/$(docmoduledir)'
.PHONY: uninstall-ratelimit-docs

src/redis/rl_scripts_gen.h: $(LUA_SCRIPTS) src/gen_scripts.sh
	sh src/gen_scripts.sh lua > $@.tmp && mv $@.tmp $@

src/redis/rl_scripts.o: src/redis/rl_scripts_gen.h

# PGXS tracks no header dependencies: rebuild every object when one changes.
# The generated header is only rl_scripts.o's (above): listed for all, it
# would be found only by a second make, which would then rebuild everything.
$(OBJS): $(filter-out src/redis/rl_scripts_gen.h,$(wildcard src/*.h src/*/*.h))
