#!/bin/bash
#
# test/check.sh
#
# The project's test command:  bash test/check.sh
#
# On a fresh Debian 12 machine, as root, it installs what is missing,
# builds and installs the extension, starts a throwaway Redis (the first
# free port from 6399 on, or RL_CHECK_REDIS_PORT) and PostgreSQL (on a
# socket in its temporary directory) on loopback, and runs
#   1. the pg_regress suites listed in the Makefile's REGRESS,
#   2. the same suites again against a local Redis Cluster of three
#      masters and three replicas (suite "regress_cluster";
#      test/lib/cluster.sh), and
#   3. the TAP suites test/t/*.pl, if any; they start their own servers.
# A user other than root who already has the packages can run it too: it
# then installs the build if it may, or goes on if the installed extension
# is byte for byte this build.
#
# It ends with one line per suite, a closing summary of what the suites
# measured in this run (load held, faults staged and survived, bad inputs
# tried, counts lost or doubled; see rl_facts_table) and, as its very last
# line, "N passed, N failed" summed over pg_regress tests and TAP test
# points.
# The exit status is non-zero if anything failed.  Every server it started
# is stopped on exit (test/lib/servers.sh traps EXIT); RL_KEEP=1 keeps
# the temporary directory for inspection.

set -u

. "$(dirname "${BASH_SOURCE[0]}")/lib/servers.sh"
. "$(dirname "${BASH_SOURCE[0]}")/lib/cluster.sh"

# Redis listens on loopback: the first free port from 6399 on, unless
# RL_CHECK_REDIS_PORT names one.  PostgreSQL listens only on a socket in
# its own temporary directory, so its port number never collides.
RL_CHECK_REDIS_PORT=${RL_CHECK_REDIS_PORT:-}
RL_CHECK_PG_PORT=${RL_CHECK_PG_PORT:-54399}
RL_PGXS_DIR=/usr/lib/postgresql/$RL_PG_VERSION/lib/pgxs
RL_PG_REGRESS=$RL_PGXS_DIR/src/test/regress/pg_regress
RL_TAP_LIB=$RL_PGXS_DIR/src/test/perl
# Safety nets only, for a run that wedges.  pg_regress takes seconds.
# Each TAP suite has a budget of its own, ten minutes plus the soak's
# length (RL_SOAK_SECONDS, 30 s by default): the longest but the soak
# takes under a minute on a 2-core machine (012_hostile_peer, which
# builds the source once more).  A suite over its budget fails alone,
# with a test point that says so, and the others still run; one net over
# all of them would instead grow with their number and with the machine's
# speed, and a slow machine would fail the last suites for the time the
# first ones took.
RL_REGRESS_TIMEOUT=180
RL_TAP_BUDGET=${RL_TAP_BUDGET:-$((600 + ${RL_SOAK_SECONDS:-30}))}

RL_SUITES=()			# "name passed failed", one per suite
# RL_ONLY="basic 005_property ...": run only the named suites (pg_regress
# test names, "pg_regress" for all of them, "regress_cluster" for their
# pass against a cluster, and TAP file names without .pl); unset runs
# every suite.  RL_SERVER=valkey runs them all against Valkey, and
# RL_PG_VERSION names the PostgreSQL (test/lib/servers.sh).
RL_ONLY=${RL_ONLY:-}

# True if the suite NAME is to run.
rl_selected() {
	[ -z "$RL_ONLY" ] && return 0
	case " $RL_ONLY " in
		*" $1 "*) return 0 ;;
	esac
	return 1
}

rl_note() {
	echo "== $*"
}

# A command line that runs as the cluster owner; unlike rl_as_owner it can
# go behind timeout(1), which only runs programs.
rl_owner_cmd() {
	if [ "$(id -u)" = 0 ]; then
		echo runuser -u postgres --
	fi
}

# Builds and installs under the build lock, so that several checkouts on
# one machine never run make install at the same moment.
rl_check_setup() {
	local lock=/tmp/rl-build.lock
	if (: >>"$lock") 2>/dev/null; then
		(
			flock 9
			rl_setup
		) 9>>"$lock" && return 0
	else
		rl_setup && return 0
	fi
	[ "$(id -u)" = 0 ] && return 1
	# Not root: the build may be fine and only the install refused.  Go on
	# if what is installed is exactly what was built.
	rl_installed_is_current
}

rl_installed_is_current() {
	local pg_config=$RL_PGBIN/pg_config libdir sharedir f
	libdir=$("$pg_config" --pkglibdir) || return 1
	sharedir=$("$pg_config" --sharedir)/extension || return 1
	for f in "$RL_ROOT"/ratelimit.so "$RL_ROOT"/ratelimit.control \
		"$RL_ROOT"/sql/ratelimit--*.sql; do
		case $f in
			*.so) cmp -s "$f" "$libdir/${f##*/}" ;;
			*) cmp -s "$f" "$sharedir/${f##*/}" ;;
		esac || {
			echo "the installed extension differs from this checkout's" \
				"build; install it first (sudo make install) or run as root" >&2
			return 1
		}
	done
	echo "could not install, but the installed extension is this build"
}

# README's two commands, "make && make install", must build once: an
# install that compiles again leaves root-owned objects under sudo.
rl_check_build() {
	local again
	again=$(make -C "$RL_ROOT" -n with_llvm=no PG_CONFIG="$RL_PG_CONFIG" install 2>/dev/null | grep -c -E '^(gcc|cc|clang) ')
	if [ "$again" = 0 ]; then
		RL_SUITES+=("build 1 0")
	else
		echo "make install would compile again ($again commands)" >&2
		RL_SUITES+=("build 0 1")
	fi
}


# The REGRESS list, as make sees it (falls back to the Makefile's text).
rl_regress_list() {
	local list
	list=$(make -s --no-print-directory -C "$RL_ROOT" -f Makefile -f - \
		rl-print-regress <<<'rl-print-regress: ; @echo $(REGRESS)' 2>/dev/null)
	if [ -z "$list" ]; then
		list=$(sed -n 's/^REGRESS[[:space:]]*=[[:space:]]*//p' "$RL_ROOT/Makefile")
	fi
	echo $list
}

# pg_regress reads sql/ and expected/ as the cluster owner; when it cannot
# read the checkout (a home directory, say), it gets a copy.
rl_regress_inputdir() {
	if rl_as_owner test -r "$RL_ROOT/sql" -a -x "$RL_ROOT/sql" \
		-a -r "$RL_ROOT/expected" -a -x "$RL_ROOT/expected"; then
		echo "$RL_ROOT"
		return
	fi
	mkdir -p "$RL_TMP/regress-input"
	cp -r "$RL_ROOT/sql" "$RL_ROOT/expected" "$RL_TMP/regress-input/"
	[ "$(id -u)" = 0 ] && chown -R postgres: "$RL_TMP/regress-input"
	echo "$RL_TMP/regress-input"
}

# The REGRESS tests RL_ONLY selects (all when it names none of them).
rl_regress_selected() {
	local all tests=() t
	read -r -a all <<<"$(rl_regress_list)"
	for t in "${all[@]}"; do
		rl_selected "$t" && tests+=("$t")
	done
	[ ${#tests[@]} -eq 0 ] && tests=("${all[@]}")
	echo "${tests[*]}"
}

# rl_run_regress SUITE DIR TEST...: one pg_regress run of the tests into
# $RL_TMP/DIR, reported as the suite line SUITE.
rl_run_regress() {
	local suite=$1 dir=$2
	shift 2
	local tests=("$@") inputdir out rc passed failed total
	if [ ${#tests[@]} -eq 0 ]; then
		echo "no REGRESS list in the Makefile" >&2
		RL_SUITES+=("$suite 0 1")
		return
	fi
	inputdir=$(rl_regress_inputdir)
	mkdir -p "$RL_TMP/$dir"
	[ "$(id -u)" = 0 ] && chown postgres: "$RL_TMP/$dir"
	out=$RL_TMP/$dir/pg_regress.log

	rl_note "$suite: ${tests[*]}"
	# shellcheck disable=SC2046
	(cd "$RL_TMP" && timeout -k 10 "$RL_REGRESS_TIMEOUT" $(rl_owner_cmd) "$RL_PG_REGRESS" \
		--inputdir="$inputdir" --outputdir="$RL_TMP/$dir" \
		--bindir="$RL_PGBIN" --host="$RL_TMP" --port="$RL_CHECK_PG_PORT" \
		--user=postgres --dbname=contrib_regression \
		--encoding=UTF8 --no-locale \
		--load-extension=ratelimit "${tests[@]}") 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}

	# "test basic ... ok  12 ms" (or "FAILED"), one line per test; from
	# PostgreSQL 16 on, TAP: "ok 1  - basic  12 ms" (or "not ok").
	passed=$(grep -cE '^(test +)?[[:space:]]*[A-Za-z0-9_]+ +\.\.\. ok|^ok [0-9]+ +[-+] ' "$out")
	failed=$(grep -cE '^(test +)?[[:space:]]*[A-Za-z0-9_]+ +\.\.\. (FAILED|failed)|^not ok [0-9]+ +[-+] ' "$out")
	total=${#tests[@]}
	# A crash or a timeout can end the run before every test reported.
	if [ $((passed + failed)) -lt "$total" ]; then
		failed=$((total - passed))
	fi
	if [ "$rc" != 0 ] && [ "$failed" = 0 ]; then
		failed=1
	fi
	if [ "$failed" != 0 ]; then
		if [ -f "$RL_TMP/$dir/regression.diffs" ]; then
			rl_note "$suite: regression.diffs"
			cat "$RL_TMP/$dir/regression.diffs"
		fi
		[ "$rc" = 124 ] && echo "pg_regress timed out after ${RL_REGRESS_TIMEOUT}s"
	fi
	RL_SUITES+=("$suite $passed $failed")
}

# The pg_regress suites against standalone Redis (the server's settings);
# RL_ONLY names them one by one, or all of them as "pg_regress".
rl_run_regress_standalone() {
	local all tests=() t
	read -r -a all <<<"$(rl_regress_list)"
	for t in "${all[@]}"; do
		{ rl_selected "$t" || rl_selected pg_regress; } && tests+=("$t")
	done
	[ ${#all[@]} -gt 0 ] && [ ${#tests[@]} -eq 0 ] && return
	rl_run_regress pg_regress regress "${tests[@]}"
}

# True once a new session of the check server sees setting NAME = VALUE
# (pg_reload_conf only signals the postmaster; 5 s at most).
rl_wait_setting() {
	for _ in $(seq 50); do
		[ "$(rl_psql check -Atc "SHOW $1")" = "$2" ] && return 0
		sleep 0.1
	done
	echo "$1 is not $2 after the reload" >&2
	return 1
}

# The same suites, unchanged, against a real Redis Cluster of three
# masters with a replica each (RL_ONLY name: regress_cluster; with REGRESS
# names beside it, only those).  The server is switched with ALTER SYSTEM, as a user would:
# ratelimit.redis_mode = cluster and ratelimit.redis_nodes = every master.
# The expected files are the standalone ones; where a line must differ
# (the endpoint rl_status() prints), expected/<test>_1.out is the
# cluster's.  The cluster is stopped again before the TAP suites start
# (they use its port block).
rl_run_regress_cluster() {
	local tests t0 t1 t2
	rl_selected regress_cluster || return 0
	read -r -a tests <<<"$(rl_regress_selected)"
	t0=$EPOCHREALTIME
	if ! rl_start_cluster rc 3 1; then
		echo "could not start the Redis Cluster" >&2
		RL_SUITES+=("regress_cluster 0 1")
		rl_stop_cluster rc
		return
	fi
	rl_note "cluster: $RL_CLUSTER_SEEDS, ready in" \
		"$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
	if ! rl_psql check -q \
		-c "ALTER SYSTEM SET ratelimit.redis_mode = cluster" \
		-c "ALTER SYSTEM SET ratelimit.redis_nodes = '$RL_CLUSTER_SEEDS'" \
		-c "SELECT pg_reload_conf()" >/dev/null ||
		! rl_wait_setting ratelimit.redis_mode cluster; then
		RL_SUITES+=("regress_cluster 0 1")
		rl_stop_cluster rc
		return
	fi
	t1=$EPOCHREALTIME
	rl_run_regress regress_cluster regress-cluster "${tests[@]}"
	t2=$EPOCHREALTIME
	rl_note "regress_cluster: scripts run per node (FCALL + EVALSHA + EVAL calls):" \
		"$(rl_cluster_script_calls)"
	rl_psql check -q \
		-c "ALTER SYSTEM RESET ratelimit.redis_mode" \
		-c "ALTER SYSTEM RESET ratelimit.redis_nodes" \
		-c "SELECT pg_reload_conf()" >/dev/null
	rl_stop_cluster rc
	rl_note "regress_cluster: $(awk -v a="$t0" -v b="$t1" -v c="$t2" \
		-v d="$EPOCHREALTIME" 'BEGIN { printf "%.1f s in all: start %.1f, tests %.1f, stop %.1f",
			d - a, b - a, c - b, d - c }')"
}

# TAP::Harness with a callback that writes, for each test file as it
# ends, "file passed failed".  A file that dies, misses its plan or exits
# non-zero counts at least one failure; a file that never reports
# (the harness died) is counted by the caller.  Each file runs under
# timeout(1) with its budget, RL_TAP_BUDGET seconds; the TERM it sends
# reaches the suite's perl alone (--foreground), where RLBudget turns it
# into a failed test point and an exit that stops the suite's servers.
# The libraries go in PERL5LIB, which a suite that re-executes itself
# (RLNetns) keeps, and so does PERL5OPT.
RL_TAP_WRAPPER='
use strict;
use warnings;
use TAP::Harness;

my ($results, @files) = @ARGV;
open(my $fh, ">", $results) or die "$results: $!";
$fh->autoflush(1);
$ENV{PERL5LIB} = join(":", split(/:/, $ENV{RL_TAP_INC}),
	grep { length } ($ENV{PERL5LIB} // ""));
$ENV{PERL5OPT} = "-MRLBudget";
my $harness = TAP::Harness->new({
	verbosity => 0,
	color => 0,
	timer => 1,
	exec => sub {
		my (undef, $file) = @_;
		return [ "timeout", "--foreground", "--kill-after=60",
			$ENV{RL_TAP_BUDGET}, $^X, $file ];
	},
});
# after_test gets the job as [ file name, description ].
$harness->callback(after_test => sub {
	my ($job, $parser) = @_;
	my $passed = scalar($parser->passed);
	my $failed = scalar($parser->failed);
	$failed = 1 if $failed == 0 && $parser->has_problems;
	printf $fh "%s %d %d%s\n", $job->[0], $passed, $failed,
	  ($parser->skip_all ? " skipped" : "");
});
my $aggregate = $harness->runtests(@files);
exit($aggregate->all_passed ? 0 : 1);
'

rl_run_tap() {
	local files=() f name results rc line passed failed srcdir
	for f in "$RL_ROOT"/test/t/*.pl; do
		[ -f "$f" ] && rl_selected "$(basename "$f" .pl)" &&
			files+=("test/t/${f##*/}")
	done
	if [ ${#files[@]} -eq 0 ]; then
		rl_note "TAP: no test/t/*.pl, nothing to run"
		return
	fi
	mkdir -p "$RL_TMP/tap"
	[ "$(id -u)" = 0 ] && chown postgres: "$RL_TMP/tap"
	results=$RL_TMP/tap/results
	# The suites run as the cluster owner, from the checkout, or from a
	# copy of its test/ (and README.md and doc/, which 015_acl and 031_docs
	# read) when the owner cannot read the checkout (a clone under /root,
	# mode 700).
	srcdir=$RL_ROOT
	if ! rl_as_owner test -r "$RL_ROOT/test/perl" -a -x "$RL_ROOT/test/perl" \
		-a -r "$RL_ROOT/test/t" -a -x "$RL_ROOT/test/t" -a -x "$RL_ROOT"; then
		srcdir=$RL_TMP/tap-src
		mkdir -p "$srcdir"
		cp -r "$RL_ROOT/test" "$RL_ROOT/README.md" "$RL_ROOT/doc" "$srcdir/"
		# 012_hostile_peer builds the source once more, under ASan.
		cp -r "$RL_ROOT/src" "$RL_ROOT/lua" "$RL_ROOT/sql" "$RL_ROOT/Makefile" \
			"$RL_ROOT/ratelimit.control" "$srcdir/"
		[ "$(id -u)" = 0 ] && chown -R postgres: "$srcdir"
	fi

	rl_note "TAP: ${files[*]}"
	# The TAP suites start their own servers; RL_REDIS_PORT is not theirs.
	# shellcheck disable=SC2046
	(cd "$srcdir" && $(rl_owner_cmd) env \
		-u RL_REDIS_PORT \
		RL_TAP_BUDGET="$RL_TAP_BUDGET" \
		RL_SERVER="$RL_SERVER" \
		PATH="$RL_PGBIN:$PATH" \
		TESTDIR="$RL_TMP/tap" \
		TESTDATADIR="$RL_TMP/tap/tmp_check" \
		TESTLOGDIR="$RL_TMP/tap/tmp_check/log" \
		RL_FACTS="$RL_TMP/tap/facts" \
		PG_REGRESS="$RL_PG_REGRESS" \
		RL_TAP_INC="$RL_TAP_LIB:$srcdir/test/perl" \
		perl -e "$RL_TAP_WRAPPER" "$results" "${files[@]}")
	rc=$?

	for f in "${files[@]}"; do
		name=${f##*/}
		line=$(grep -F "$f " "$results" 2>/dev/null | tail -n 1)
		if [ -n "$line" ]; then
			read -r _ passed failed _ <<<"$line"
		else
			# Never reported: the harness died.
			passed=0
			failed=1
		fi
		RL_SUITES+=("${name%.pl} $passed $failed")
	done
	if [ "$rc" != 0 ] && [ -d "$RL_TMP/tap/tmp_check/log" ]; then
		echo "TAP logs are in $RL_TMP/tap/tmp_check/log (kept with RL_KEEP=1)"
	fi
}

# The closing summary: figures the suites measured in this run.  The TAP
# suites append "key<TAB>value" lines to $RL_TMP/tap/facts (RLRedis::fact),
# each key naming a figure and its suite, e.g. "calls.007" (summed),
# "fault" (a name), "figure.007" (a measurement, printed as it is); the
# bad inputs of the pg_regress suites are the argument errors in their
# results.
rl_facts_table() {
	local facts=$RL_TMP/tap/facts results=$RL_TMP/regress/results
	local regress_bad=0 f n
	for f in errors batch layered; do
		[ -f "$results/$f.out" ] || continue
		n=$(grep -cE '(^|[| ])(22004|22023|2202E|54000): |^ERROR:  ' \
			"$results/$f.out")
		regress_bad=$((regress_bad + n))
	done
	[ -f "$facts" ] || facts=/dev/null
	rl_note "closing summary (figures measured in this run)"
	awk -F '\t' -v regress_bad="$regress_bad" '
	{
		n = split($1, part, ".")
		name = part[1]
		suite = (n > 1) ? part[2] : "?"
		if (name == "fault" || name == "fault_failed") {
			nfault++
			fault[nfault] = $2
			failed[nfault] = (name == "fault_failed")
			nfailed += failed[nfault]
		} else if (name == "figure") {
			figure[++nfigure] = "TAP " suite ": " $2
		} else if (name == "todo") {
			if (!(($2) in todo_seen)) {
				todo_seen[$2] = 1
				todo[++ntodo] = "TAP " suite ": " $2
			}
		} else if (name == "clients") {
			if ($2 + 0 > clients[suite]) clients[suite] = $2 + 0
			if ($2 + 0 > maxclients) maxclients = $2 + 0
		} else {
			sum[name, suite] += $2
			total[name] += $2
			seen[name, suite] = 1
		}
	}
	function row(what, figures) { printf "%-26s %s\n", what, figures }
	function sub_row(figures) { printf "%-26s   %s\n", "", figures }
	END {
		row("load held", sprintf("%d calls from up to %d concurrent clients, %d errors",
			total["calls"], maxclients, total["pgbench_errors"]))
		for (i = 1; i < 100; i++) {
			s = sprintf("%03d", i)
			if (!(("calls", s) in seen))
				continue
			extra = ""
			if (("allowed", s) in seen)
				extra = sprintf("; hot keys: %d allowed + %d denied, exact",
					sum["allowed", s], sum["denied", s])
			sub_row(sprintf("TAP %s: %d calls, %d clients, %d errors%s", s,
				sum["calls", s], clients[s], sum["pgbench_errors", s], extra))
		}
		row("faults staged, survived", sprintf("%d staged, %d survived",
			nfault, nfault - nfailed))
		for (i = 1; i <= nfault; i++)
			sub_row((failed[i] ? "FAILED    " : "survived  ") fault[i])
		row("bad inputs tried", sprintf("%d, each refused with its documented SQLSTATE",
			total["bad_inputs"] + regress_bad))
		for (i = 1; i < 100; i++) {
			s = sprintf("%03d", i)
			if (("bad_inputs", s) in seen)
				sub_row(sprintf("TAP %s: %d random argument combinations", s,
					sum["bad_inputs", s]))
		}
		sub_row(sprintf("pg_regress errors, batch, layered: %d", regress_bad))
		row("lost or double-counted", sprintf("%d (must be 0) in %d counted calls checked",
			total["miscounted"], total["count_checks"]))
		for (i = 1; i < 100; i++) {
			s = sprintf("%03d", i)
			if (("count_checks", s) in seen)
				sub_row(sprintf("TAP %s: %d in %d", s, sum["miscounted", s],
					sum["count_checks", s]))
		}
		if (nfigure > 0) {
			row("also measured", "")
			for (i = 1; i <= nfigure; i++)
				sub_row(figure[i])
		}
		if (ntodo > 0) {
			row("known defects (TODO)", ntodo)
			for (i = 1; i <= ntodo; i++)
				sub_row(todo[i])
		}
	}' "$facts"
}

rl_summary() {
	local s name passed failed total_passed=0 total_failed=0
	rl_note "summary"
	for s in "${RL_SUITES[@]}"; do
		read -r name passed failed <<<"$s"
		printf '%-28s %6d passed %6d failed\n' "$name" "$passed" "$failed"
		total_passed=$((total_passed + passed))
		total_failed=$((total_failed + failed))
	done
	rl_facts_table
	echo "$total_passed passed, $total_failed failed"
	[ "$total_failed" = 0 ]
}

main() {
	cd "$RL_ROOT" || exit 1

	rl_note "setup: packages, build, install"
	if ! rl_check_setup; then
		echo "setup failed (packages, build or install)" >&2
		RL_SUITES+=("setup 0 1")
		rl_summary
		exit 1
	fi

	rl_check_build

	[ -n "$RL_CHECK_REDIS_PORT" ] || RL_CHECK_REDIS_PORT=$(rl_free_port 6399)
	if [ -z "$RL_CHECK_REDIS_PORT" ] || ! rl_port_free "$RL_CHECK_REDIS_PORT"; then
		echo "port ${RL_CHECK_REDIS_PORT:-6399} is in use; set RL_CHECK_REDIS_PORT" >&2
		RL_SUITES+=("servers 0 1")
		rl_summary
		exit 1
	fi
	rl_note "servers: $("$RL_SERVER_BIN" --version | sed 's/ *sha=.*//') on" \
		"$RL_CHECK_REDIS_PORT, PostgreSQL $RL_PG_VERSION on $RL_CHECK_PG_PORT"
	if ! rl_start_redis check "$RL_CHECK_REDIS_PORT" ||
		! rl_start_pg check "$RL_CHECK_PG_PORT" "$RL_CHECK_REDIS_PORT" \
			"lc_messages = 'C'"; then
		echo "could not start the test servers" >&2
		RL_SUITES+=("servers 0 1")
		rl_summary
		exit 1
	fi

	rl_run_regress_standalone
	rl_run_regress_cluster
	rl_run_tap
	rl_summary
}

main "$@"
