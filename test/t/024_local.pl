# test/t/024_local.pl
#
# The local engine (ratelimit.engine = local) on a real server with no
# Redis (ratelimit.redis_port = 1, failure_mode = error: any use of Redis
# would be an ERROR):
#   - exact counts with 32 and 64 sessions at once on one key, for each
#     algorithm, and on many keys (rl_allow_many);
#   - every entry point answers without Redis;
#   - rl_reset from another backend;
#   - the table full: the documented refusal (WARNING and the policy, or
#     ERROR 53400 under failure_mode = error), never a silent admission,
#     and expired entries reclaimed;
#   - the sliding logs' pool full (a server of its own): the same refusal,
#     denials still exact, rl_reset and expiry giving blocks back;
#   - READ ONLY transactions and a hot standby (streaming replica);
#   - a backend killed with SIGKILL while it holds a partition's lock: the
#     crash restart reinitialises the table, nothing stays wedged;
# and ratelimit.failure_mode = local on a second server whose Redis is
# stopped: the local engine answers, exactly, and Redis again once back.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis qw(rl_node rl_session rl_run rl_start rl_finish rl_wait_for fact);

my $T0 = '1800000000000';
my @ALGOS =
  qw(fixed_window sliding_log sliding_counter token_bucket leaky_bucket gcra);

my $node = PostgreSQL::Test::Cluster->new('c024');
$node->init(allows_streaming => 1);
$node->append_conf(
	'postgresql.conf', q{
max_connections = 100
shared_preload_libraries = 'ratelimit'
ratelimit.engine = local
ratelimit.redis_port = 1
ratelimit.failure_mode = error
ratelimit.local_max_entries = 4000
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION ratelimit');

# Runs n psql processes at once, each the same SQL (a pinned clock), and
# returns their outputs.
sub parallel
{
	my ($n, $sql) = @_;
	my @h;
	local $ENV{PGOPTIONS} = "-c ratelimit.test_clock_ms=$T0";
	for my $i (1 .. $n)
	{
		my ($out, $err) = ('', '');
		push @h, [ IPC::Run::start(
			[ 'psql', '-XAtq', '-d', $node->connstr('postgres'),
				'-v', 'ON_ERROR_STOP=1', '-c', $sql ],
			'>', \$out, '2>', \$err), \$out, \$err ];
	}
	my @outs;
	for my $h (@h)
	{
		$h->[0]->finish;
		die "psql: ${$h->[2]}" if ${ $h->[2] } =~ /ERROR/;
		chomp(my $o = ${ $h->[1] });
		push @outs, $o;
	}
	return @outs;
}

sub sum { my $s = 0; $s += $_ for @_; return $s }

# 1. One key, every algorithm, 32 and 64 sessions: exactly the limit.
for my $n (32, 64)
{
	for my $algo (@ALGOS)
	{
		my $L = 1000;
		my $key = "hot:$n:$algo";
		my @got = parallel($n,
			"SELECT count(*) FILTER (WHERE allowed) FROM generate_series(1, 60) g, "
			  . "LATERAL rl_allow('$key', '$algo', $L, '1 hour', 1 + 0 * g)");
		is(sum(@got), $L, "$n sessions x 60 calls on one $algo key admit exactly $L");
	}
}

# Many keys: 64 sessions, each 20 times rl_allow_many over the same 100
# keys, 7 per hour per key: exactly 700 admitted.
for my $algo (@ALGOS)
{
	my $keys = "ARRAY(SELECT 'many:$algo:' || k FROM generate_series(1, 100) k)";
	my @got = parallel(64,
		"SELECT count(*) FILTER (WHERE m.allowed) FROM generate_series(1, 20) g, "
		  . "LATERAL rl_allow_many($keys, '$algo', 7, '1 hour', 1 + 0 * g) m");
	is(sum(@got), 700, "64 sessions on 100 $algo keys admit exactly 7 per key");
}

# 2. rl_reset from another backend.
my $a = rl_session($node);
my $b = rl_session($node);
rl_run($_, "SET ratelimit.test_clock_ms = $T0") for $a, $b;
my ($out) = rl_run($a,
	"SELECT string_agg(allowed::text, ',') FROM generate_series(1, 3) g, "
	  . "LATERAL rl_allow('reset:1', 'gcra', 2, '1 hour', 1 + 0 * g)");
is($out, 'true,true,false', 'the key is full in session A');
($out) = rl_run($b, "SELECT rl_reset('reset:1', 'gcra', 2, '1 hour')");
is($out, 't', 'session B resets it');
($out) = rl_run($a, "SELECT allowed, remaining FROM rl_allow('reset:1', 'gcra', 2, '1 hour')");
is($out, 't|1', 'session A starts afresh after the reset');

# 4. Every entry point without Redis; READ ONLY; no transaction id.
$node->safe_psql('postgres', q{
CREATE TABLE t024 (author int);
CREATE TRIGGER t024_row BEFORE INSERT ON t024
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author', 'gcra', '2', '1 hour');
CREATE TABLE t024s (author int);
CREATE TRIGGER t024_stmt AFTER INSERT ON t024s REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author', 'fixed_window', '2', '1 hour');
});
# Since 0.4.0 a limiter is its key, algorithm, limit, window and burst, so
# the layered rule ('gcra', 5, '1 hour') on 'ep' is the limiter of
# rl_allow('ep', 'gcra', 5, '1 hour'): it finds that call's unit used (3
# left; before 0.4.0 a layered rule's key was apart, 4).
my ($o, $err) = rl_run($b, q{
SELECT rl_allow('ep', 'gcra', 5, '1 hour') IS NOT NULL,
	   (rl_peek('ep', 'gcra', 5, '1 hour')).remaining,
	   (SELECT count(*) FROM rl_allow_many(ARRAY['ep1', 'ep2'], 'gcra', 5, '1 hour')),
	   (rl_allow_layered('ep', ARRAY[('gcra', 5, '1 hour'), ('fixed_window', 9, '1 day')]::rl_rule[])).remaining,
	   rl_reset('ep', 'gcra', 5, '1 hour')});
is($o, 't|4|2|3|t', 'rl_allow, rl_peek, rl_allow_many, rl_allow_layered, rl_reset: no Redis');
my @errs;
for my $sql ('INSERT INTO t024 VALUES (1), (1)', 'INSERT INTO t024 VALUES (1)',
	'INSERT INTO t024s VALUES (1), (1)', 'INSERT INTO t024s VALUES (1)',
	"SELECT rl_postgrest_guard('gcra', 1, '1 hour')",
	"SELECT rl_postgrest_guard('gcra', 1, '1 hour')")
{
	($o, $err) = rl_run($b, $sql);
	push @errs, $err =~ /ERROR:  (\w+):/ ? $1 : 'ok';
}
is("@errs", 'ok PT429 ok PT429 ok PGRST',
	'row trigger, statement trigger and guard admit, then refuse');
my ($rows) = rl_run($b, "SELECT (SELECT count(*) FROM t024) || ',' || (SELECT count(*) FROM t024s)");
is($rows, '2,2', 'the refused statements stored nothing');
rl_run($b, 'BEGIN READ ONLY');
($o) = rl_run($b, "SELECT (rl_allow('ro', 'token_bucket', 5, '1 hour')).remaining, "
	  . 'pg_current_xact_id_if_assigned() IS NULL');
rl_run($b, 'COMMIT');
is($o, '4|t', 'a READ ONLY transaction: counted, and no transaction id taken');
($o) = rl_run($b, 'SELECT connected, failures, fail_open, fail_closed FROM rl_status()');
is($o, 'f|0|0|0', 'no connection to Redis was ever made');

# 3a. A chosen partition.  A key's partition is the top bits of its hash.
# Were the seed known (it was 0), anyone could compute keys that share a
# victim's partition (hashtextextended() in SQL is the same hash) and fill
# it with 80 calls (32 entries a partition here), so that the victim's
# first call found no room and got the failure policy's answer: under
# open, let through, however often.  The seed is drawn at server start,
# so keys chosen for seed 0 spread over the partitions.
my $same_part = "WITH v AS (SELECT (SELECT oid FROM pg_database WHERE datname = current_database()) AS db), "
  . "p AS (SELECT hashtextextended(format('rl:{%s:victim:7}:gcra:1:3600000ms', db), 0) >> 57 AS p FROM v) "
  . "SELECT ARRAY(SELECT 'part:' || g FROM generate_series(1, 40000) g, v, p "
  . "WHERE hashtextextended(format('rl:{%s:part:%s}:fixed_window:1:3600000ms', db, g), 0) >> 57 = p.p LIMIT 80)";
($o) = rl_run($a, "SET ratelimit.test_clock_ms = $T0;\n"
	  . "SELECT count(*) FILTER (WHERE allowed) FROM rl_allow_many(($same_part), 'fixed_window', 1, '1 hour')");
is($o, '80', '80 keys chosen to share the victim\'s partition under seed 0, each admitted');
($o, $err) = rl_run($a, "SET ratelimit.failure_mode = open;\n"
	  . "SELECT string_agg(allowed || '/' || coalesce(remaining::text, 'policy'), ',') "
	  . "FROM generate_series(1, 3) g, LATERAL rl_allow('victim:7', 'gcra', 1, '1 hour', 1 + 0 * g)");
is($o, 'true/0,false/0,false/0', 'the victim still has an entry: limited exactly (1 of 3), no policy answer');
unlike($err, qr/local_max_entries is full/, 'and no WARNING that the table is full');
rl_run($a, "SET ratelimit.failure_mode = error");

# 3. The table full.  4000 entries are 32 in each of 128 partitions, at
# most 4096: 10000 new keys cannot all fit.
my $fill = "SELECT count(*) FILTER (WHERE allowed), count(*) FILTER (WHERE NOT allowed), "
  . "count(*) FILTER (WHERE remaining IS NULL) FROM rl_allow_many("
  . "ARRAY(SELECT 'full:' || k FROM generate_series(1, 10000) k), 'fixed_window', 3, '1 hour')";
($o, $err) = rl_run($a, "SET ratelimit.failure_mode = closed;\n$fill");
my ($admitted, $denied, $policy) = split /\|/, $o;
# About 700 entries are taken by the sections above.
ok($admitted >= 3000 && $admitted <= 4096 - 600,
	"table full: $admitted of 10000 new keys got an entry (4096 at most in all)");
is($admitted + $policy, 10000, 'every other key got the policy answer (closed: denied)');
is($denied, $policy, 'no key was admitted without an entry');
like($err, qr/WARNING:  (?:53400: )?ratelimit.local_max_entries is full; calls are denied/,
	'a WARNING says the table is full and what the calls get');
# Keys that have an entry still count; a peek needs none.
($o) = rl_run($a, "SELECT allowed, remaining FROM rl_allow('reset:1', 'gcra', 2, '1 hour')");
is($o, 't|0', 'a key with an entry still counts exactly');
($o) = rl_run($a, "SELECT allowed, remaining FROM rl_peek('new:key', 'fixed_window', 3, '1 hour')");
is($o, 't|3', 'a peek of a new key needs no entry');
($o, $err) = rl_run($a, "SET ratelimit.failure_mode = error;\n"
	  . "SELECT * FROM rl_allow('new:key', 'fixed_window', 3, '1 hour')");
like($err, qr/ERROR:  53400: ratelimit.local_max_entries is full/,
	'under failure_mode = error a new key is ERROR 53400');
($o, $err) = rl_run($a, "SET ratelimit.failure_mode = open;\n"
	  . "SELECT allowed, remaining IS NULL FROM rl_allow('new:key', 'fixed_window', 3, '1 hour')");
is($o, 't|t', 'under open it is let through as a policy answer (remaining NULL)');
# Two hours later every entry has expired: reclaimed for new keys.
($o) = rl_run($a, "SET ratelimit.failure_mode = error;\n"
	  . "SET ratelimit.test_clock_ms = " . ($T0 + 7_200_000) . ";\n"
	  . "SELECT count(*) FILTER (WHERE allowed) FROM rl_allow_many("
	  . "ARRAY(SELECT 'later:' || k FROM generate_series(1, 500) k), 'gcra', 3, '1 hour')");
is($o, 500, 'expired entries are reclaimed for new keys');
rl_run($a, "SET ratelimit.test_clock_ms = $T0");

# 5. A hot standby answers from its own table.
$node->backup('b024');
my $standby = PostgreSQL::Test::Cluster->new('s024');
$standby->init_from_backup($node, 'b024', has_streaming => 1);
$standby->start;
$node->wait_for_catchup($standby);
($o) = $standby->psql('postgres', "SET ratelimit.test_clock_ms = $T0; "
	  . "SELECT pg_is_in_recovery(), count(*) FILTER (WHERE allowed) "
	  . "FROM generate_series(1, 10) g, LATERAL rl_allow('standby', 'sliding_log', 4, '1 hour', 1 + 0 * g)",
	stdout => \$out);
is($out, 't|4', 'a hot standby limits exactly (4 of 10), in recovery');
($o) = $node->safe_psql('postgres', "SET ratelimit.test_clock_ms = $T0; "
	  . "SELECT (rl_peek('standby', 'sliding_log', 4, '1 hour')).remaining");
is($o, '4', "the standby's counts are its own (the primary's key is fresh)");
$standby->stop;

$_->quit for $a, $b;

# 6. SIGKILL while holding a partition lock.  A backend loops on one key;
# it is stopped (SIGSTOP) until a probe on the same key waits for the
# partition's LWLock, which proves the stopped backend holds it; then it
# is killed.
my ($lout, $lerr) = ('', '');
# Their clock is 4 hours on: every entry above has expired, so the key's
# partition has room whatever its place.
local $ENV{PGOPTIONS} = '-c ratelimit.deny_cache=off -c ratelimit.test_clock_ms=' . ($T0 + 14_400_000);
my $looper = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres') . ' application_name=rl_looper',
		'-c', "SELECT count(*) FROM generate_series(1, 1000) g, LATERAL rl_allow_many(ARRAY(SELECT 'crash' || left(g::text, 0) FROM generate_series(1, 100000)), 'gcra', 1000000, '1 hour')" ],
	'>', \$lout, '2>', \$lerr);
my $lpid;
rl_wait_for(sub {
	$lpid = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name = 'rl_looper' AND state = 'active'");
	return $lpid ne '';
}, 10);
ok($lpid, "the looping backend runs (pid $lpid)");
my $held = 0;
my $tries = 0;
# A try costs a connection (about 20 ms) when the lock was not held; a
# check holds it a small share of its time (a per-partition clock read
# outside it), so the tries are many.
while (!$held && $tries++ < 600)
{
	kill 'STOP', $lpid;
	my ($pout, $perr) = ('', '');
	my $probe = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres') . ' application_name=rl_probe',
			'-c', "SELECT allowed FROM rl_allow('crash', 'gcra', 1000000, '1 hour')" ],
		'>', \$pout, '2>', \$perr);
	my $w = rl_wait_for(sub {
		$probe->pump_nb if $probe->pumpable;
		return !$probe->pumpable
		  || $node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE application_name = 'rl_probe' "
			  . "AND wait_event_type = 'LWLock' AND wait_event = 'ratelimit_local'") eq '1';
	}, 2);
	$held = defined $w && $probe->pumpable;
	if ($held)
	{
		kill 'KILL', $lpid;
		kill 'CONT', $lpid;
		$probe->finish;
		last;
	}
	kill 'CONT', $lpid;
	$probe->finish;
}
ok($held, "caught the backend holding the partition lock (try $tries), killed it");
fact('figure.024', "SIGKILL: the backend was caught holding the partition lock at try $tries");
$looper->finish;
my $up = rl_wait_for(sub {
	my $r = $node->psql('postgres', 'SELECT 1', stdout => \my $x);
	return $r == 0 && $x eq '1';
}, 30);
ok(defined $up, sprintf('the server is back after the crash restart (%.1f s)', $up // -1));
my $log = slurp_file($node->logfile);
like($log, qr/terminated by signal 9/, 'the postmaster saw the killed backend');
like($log, qr/all server processes terminated; reinitializing/, 'and reinitialised shared memory');
($o) = $node->safe_psql('postgres', "SET ratelimit.test_clock_ms = $T0; "
	  . "SELECT string_agg(allowed::text || ':' || remaining, ',') FROM generate_series(1, 3) g, "
	  . "LATERAL rl_allow('crash', 'gcra', 2, '1 hour', 1 + 0 * g)");
is($o, 'true:1,true:0,false:0', 'the key is fresh and counts exactly: no wedged lock');

# 7. failure_mode = local on a server whose Redis goes away.
my $redis = RLRedis->new(name => 'r024');
my $rnode = rl_node('c024r', $redis, qq{
ratelimit.failure_mode = local
ratelimit.retry_interval = 100
});
my $r = rl_session($rnode);
rl_run($r, "SET ratelimit.test_clock_ms = $T0");
($o) = rl_run($r, "SELECT allowed, remaining FROM rl_allow('fo', 'fixed_window', 3, '1 hour')");
is($o, 't|2', 'with Redis up, Redis answers');
my $dboid = $rnode->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');
is($redis->fw_used("rl:{$dboid:fo}:fixed_window:3:3600000ms"), '1', 'and holds the count');
$redis->kill9;
($o, $err) = rl_run($r, "SELECT string_agg(allowed::text || ':' || remaining, ',') FROM generate_series(1, 4) g, "
	  . "LATERAL rl_allow('fo', 'fixed_window', 3, '1 hour', 1 + 0 * g)");
is($o, 'true:2,true:1,true:0,false:0',
	'with Redis stopped, the local engine answers from its own count, exactly');
like($err, qr/calls are answered by this server's local engine/, 'the WARNING says so');
($o) = rl_run($r, "SELECT fail_open, fail_closed, failures > 0 FROM rl_status()");
is($o, '0|0|t', 'no open or closed policy answer, the failure is counted');
# A sliding log of 1000 per hour during the outage, exactly.
($o, $err) = rl_run($r, "SELECT count(*) FILTER (WHERE allowed), min(remaining) "
	  . "FROM generate_series(1, 1100) g, LATERAL rl_allow('fo:log', 'sliding_log', 1000, '1 hour', 1 + 0 * g)");
is($o, '1000|0', 'a sliding log of 1000 admits exactly 1000 of 1100 from the local engine');
($o) = rl_run($r, 'SELECT fail_local, fail_open, fail_closed FROM rl_stats');
is($o, '1104|0|0', 'rl_stats counts the 1104 answers of the local engine as fail_local');
$redis->start;
usleep(150_000);
($o) = rl_run($r, "SELECT allowed, remaining FROM rl_allow('fo2', 'fixed_window', 3, '1 hour')");
is($o, 't|2', 'Redis answers again once it is back');
is($redis->cmd('EXISTS', "rl:{$dboid:fo2}:fixed_window:3:3600000ms"), 1, 'the key is in Redis');

$r->quit;
$rnode->stop;
$node->stop;

# 8. The sliding logs' pool full.  1024 members are 32 blocks of 32; a
# log takes a block per 32 members it holds.
my $pnode = PostgreSQL::Test::Cluster->new('c024p');
$pnode->init;
$pnode->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'ratelimit'
ratelimit.engine = local
ratelimit.redis_port = 1
ratelimit.failure_mode = closed
ratelimit.local_log_entries = 1024
});
$pnode->start;
$pnode->safe_psql('postgres', 'CREATE EXTENSION ratelimit');
my $p = rl_session($pnode);
rl_run($p, "SET ratelimit.test_clock_ms = $T0");
my $pfill = "SELECT count(*) FILTER (WHERE allowed), count(*) FILTER (WHERE NOT allowed AND remaining IS NOT NULL), "
  . "count(*) FILTER (WHERE remaining IS NULL) FROM generate_series(1, 2000) g, "
  . "LATERAL rl_allow('pool:big', 'sliding_log', 100000, '1 hour', 1 + 0 * g)";
($o) = rl_run($p, "SELECT count(*) FILTER (WHERE allowed) FROM generate_series(1, 3) g, "
	  . "LATERAL rl_allow('pool:small', 'sliding_log', 3, '1 hour', 1 + 0 * g)");
is($o, 3, 'a small log: one block');
($o, $err) = rl_run($p, $pfill);
is($o, '992|0|1008', 'pool full: 992 calls (31 blocks) admitted, the other 1008 get the policy answer');
like($err, qr/WARNING:  (?:53400: )?ratelimit.local_log_entries is full; calls are denied/,
	'a WARNING says the pool is full and what the calls get');
($o) = rl_run($p, "SELECT allowed, remaining FROM rl_allow('pool:small', 'sliding_log', 3, '1 hour')");
is($o, 'f|0', 'a denial needs no room: still exact');
($o) = rl_run($p, "SELECT allowed, remaining FROM rl_peek('pool:big', 'sliding_log', 100000, '1 hour')");
is($o, 't|99008', 'a peek counts the 992 calls');
($o) = rl_run($p, "SELECT allowed, remaining FROM rl_allow('pool:gcra', 'gcra', 3, '1 hour')");
is($o, 't|2', 'other algorithms need no block');
($o) = rl_run($p, "SELECT allowed, remaining IS NULL FROM rl_allow('pool:new', 'sliding_log', 3, '1 hour')");
is($o, 'f|t', 'a new log gets the policy answer (closed: denied, remaining NULL)');
($o, $err) = rl_run($p, "SET ratelimit.failure_mode = error;\n"
	  . "SELECT * FROM rl_allow('pool:new', 'sliding_log', 3, '1 hour')");
like($err, qr/ERROR:  53400: ratelimit.local_log_entries is full/,
	'under failure_mode = error it is ERROR 53400');
($o) = rl_run($p, "SET ratelimit.failure_mode = closed;\n"
	  . "SELECT rl_reset('pool:big', 'sliding_log', 100000, '1 hour'), "
	  . "(rl_allow('pool:new', 'sliding_log', 3, '1 hour')).remaining");
is($o, 't|2', 'rl_reset gives the blocks back');
($o) = rl_run($p, $pfill);
is($o, '960|0|1040', 'the pool fills again (30 blocks)');
# Two hours later every log has expired.  A call reclaims them in every
# partition, its own included (but for the entries it holds), so one key
# gets all 32 blocks whichever partition it shares with the old logs.
($o) = rl_run($p, "SET ratelimit.test_clock_ms = " . ($T0 + 7_200_000) . ";\n"
	  . "SELECT count(*) FILTER (WHERE allowed) FROM generate_series(1, 2000) g, "
	  . "LATERAL rl_allow('pool:later', 'sliding_log', 100000, '1 hour', 1 + 0 * g)");
is($o, 1024, 'two hours later every log has expired: its blocks are reclaimed');
($o) = rl_run($p, 'SELECT failures > 0 FROM rl_status()');
is($o, 't', 'the refusals are counted as failures');
$p->quit;
$pnode->stop;
done_testing();
