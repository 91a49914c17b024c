# test/t/019_stats.pl
#
# Server-wide statistics (rl_stats, rl_stats_limiters, rl_stats_rtt,
# rl_stats_reset).  Several sessions make known numbers of admitted,
# denied and policy-answered calls, and exit: the server's totals are
# exact, also after those backends are gone, while a new backend's
# rl_status() starts at 0 in a reused slot.  Eight sessions denied on one
# hot key lose no denial in the limiter table.  The table holds at most
# ratelimit.stats_max_limiters entries, the most denied on top, the least
# denied evicted.  A Redis stalled for 200 ms shows in the round-trip
# percentiles, a timed-out call as a "timeout" failure.  Keys are shown
# to pg_monitor members, hidden from a role granted the view alone; only a
# superuser resets.  A session reading a table of 3000 limiters whose
# result goes slowly to a temporary file (strace delays its writes) does
# not hold the table's lock meanwhile: another session adds its denials at
# once.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;

use RLRedis
  qw(rl_node rl_session rl_run rl_start rl_finish rl_wait_for rl_wait_extension fact);

my $redis = RLRedis->new(name => 'r019');
my $node = rl_node('c019', $redis, "ratelimit.stats_max_limiters = 10\n");
my $admin = rl_session($node);

# SQL of n calls on one fixed-window key (limit per hour): "allowed|denied".
sub flood_sql
{
	my ($key, $limit, $n) = @_;
	return "SELECT count(*) FILTER (WHERE a), count(*) FILTER (WHERE NOT a) FROM "
	  . "(SELECT (rl_allow('$key', 'fixed_window', $limit, '1 hour')).allowed AS a "
	  . "FROM generate_series(1, $n)) s";
}

# Runs one SQL text in each of n fresh sessions at once, then ends them
# all; their outputs.
sub in_sessions
{
	my ($sqls, $setup) = @_;
	my @s = map { rl_session($node) } @$sqls;
	if ($setup)
	{
		rl_run($_, $setup) for @s;
	}
	rl_start($s[$_], $sqls->[$_]) for 0 .. $#s;
	my @out = map { (rl_finish($_))[0] } @s;
	$_->quit for @s;
	return @out;
}

# rl_stats columns as a hash.
sub stats
{
	my @cols = qw(calls allowed denied shadow_denied cached fail_open
	  fail_closed failures failures_timeout failures_connect failures_refused
	  failures_misconfigured failures_protocol failures_lost
	  failures_unavailable connects script_loads redirects round_trips
	  rtt_p50_ms rtt_p99_ms rtt_p999_ms limiters_evicted limiters);
	my ($out) = rl_run($admin, 'SELECT ' . join(', ', @cols) . ' FROM rl_stats');
	my %st;
	@st{@cols} = split /\|/, $out // '', -1;
	return \%st;
}

# Waits until every backend but the admin's has gone (their exit flushed).
sub others_gone
{
	return rl_wait_for(
		sub {
			(rl_run($admin,
				"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
			))[0] eq '0';
		},
		10);
}

rl_run($admin, 'SELECT rl_stats_reset()');

# 1. Four sessions, 10 calls each on their own key with a limit of 3.
my @out = in_sessions([ map { flood_sql("t:$_", 3, 10) } 1 .. 4 ]);
is(join(' ', @out), '3|7 3|7 3|7 3|7', 'each session: 3 admitted, 7 denied');
ok(defined others_gone(), 'the four backends exited');
my $st = stats();
is("$st->{calls}/$st->{allowed}/$st->{denied}", '40/12/28',
	'server totals after the backends exited: 40 calls, 12 admitted, 28 denied');
is($st->{failures}, 0, 'no failures');
ok($st->{connects} >= 4, "connects counted ($st->{connects})");
my ($lim) = rl_run($admin,
	"SELECT string_agg(substring(key from '\\{[0-9]+:(t:[0-9])\\}') || '=' || denied, ' ' ORDER BY key) FROM rl_stats_limiters"
);
is($lim, 't:1=7 t:2=7 t:3=7 t:4=7', 'each key counted with its 7 denials');

# A new backend takes a used slot: its own rl_status() starts at 0.
my @fresh = in_sessions([ ('SELECT calls FROM rl_status()') x 4 ]);
is(join(' ', @fresh), '0 0 0 0', 'new backends in reused slots: rl_status().calls is 0');

# 2. Policy answers with Redis stopped: 3 sessions x 5 open, 2 x 5 closed.
$redis->kill9;
@out = in_sessions([ (flood_sql('p:open', 3, 5)) x 3 ]);
is(join(' ', @out), '5|0 5|0 5|0', 'Redis down, open: every call let through');
@out = in_sessions([ (flood_sql('p:closed', 3, 5)) x 2 ],
	'SET ratelimit.failure_mode = closed');
is(join(' ', @out), '0|5 0|5', 'Redis down, closed: every call denied');
ok(defined others_gone(), 'the policy sessions exited');
$st = stats();
is("$st->{calls}/$st->{fail_open}/$st->{fail_closed}", '65/15/10',
	'policy answers by kind: 15 open, 10 closed, 65 calls in all');
is("$st->{allowed}/$st->{denied}", '12/28', 'policy answers are neither admitted nor denied');
ok($st->{failures} >= 5, "a failure per session at least ($st->{failures})");
is($st->{failures_connect}, $st->{failures}, 'every failure was a refused connect');
my $sum = 0;
$sum += $st->{"failures_$_"}
  for qw(timeout connect refused misconfigured protocol lost unavailable);
is($sum, $st->{failures}, 'failures by reason add up to failures');
$redis->start or die 'redis did not restart';

# 3. Eight sessions on one hot key: no denial lost in the limiter table.
rl_run($admin, 'SELECT rl_stats_reset()');
@out = in_sessions([ (flood_sql('hot', 50, 100)) x 8 ]);
my ($ok, $no) = (0, 0);
for (@out) { my ($a, $d) = split /\|/; $ok += $a; $no += $d }
is("$ok/$no", '50/750', 'c=8 on one key: 50 admitted, 750 denied');
ok(defined others_gone(), 'the eight backends exited');
$st = stats();
is("$st->{calls}/$st->{allowed}/$st->{denied}", '800/50/750', 'server totals exact at c=8');
ok($st->{cached} >= 742 && $st->{cached} <= 750,
	"deny-cache answers: all but each backend's first denial ($st->{cached})");
($lim) = rl_run($admin,
	"SELECT denied FROM rl_stats_limiters WHERE key LIKE '%:hot}:fixed_window:50:3600000ms'");
is($lim, 750, 'the hot key holds all 750 denials');

# 4. The table is bounded: 3 keys denied 20 times, then 30 denied once.
rl_run($admin, 'SELECT rl_stats_reset()');
my $sql = join('; ',
	(map { flood_sql("top:$_", 1, 21) } 1 .. 3),
	(map { flood_sql(sprintf('cold:%02d', $_), 1, 2) } 1 .. 30));
in_sessions([$sql]);
ok(defined others_gone(), 'the session exited');
my ($rows) = rl_run($admin,
	'SELECT count(*), sum(denied) FILTER (WHERE key ~ \':top:\') FROM rl_stats_limiters');
is($rows, '10|60', 'ten entries kept, the three top keys with all their 60 denials');
($lim) = rl_run($admin,
	"SELECT string_agg(substring(key from ':(top:[0-9])') || '=' || denied, ' ' ORDER BY denied DESC, key) "
	  . "FROM (SELECT * FROM rl_stats_limiters ORDER BY denied DESC, key LIMIT 3) s");
is($lim, 'top:1=20 top:2=20 top:3=20', 'the most denied keys on top');
$st = stats();
is("$st->{limiters}/$st->{limiters_evicted}", '10/23',
	'33 keys through a table of 10: 23 least-denied evicted');

# 4b. One session denied on one key across flushes (reading
# rl_stats_limiters adds the reader's pending denials first).  An entry is
# kept in the backend for the next flush, its count zeroed: each denial is
# added once, neither lost nor added again by a later flush.
my $rep = rl_session($node);
my $repq = "SELECT denied FROM rl_stats_limiters WHERE key LIKE '%:rep}:fixed_window:1:3600000ms'";
rl_run($rep, flood_sql('rep', 1, 4));
my ($r1) = rl_run($rep, $repq);
rl_run($rep, flood_sql('rep', 1, 2));
my ($r2) = rl_run($rep, $repq);
my ($r3) = rl_run($rep, $repq);
$rep->quit;
is("$r1 $r2 $r3", '3 5 5', 'one key denied across flushes: 3, then 5, and reading again adds nothing');

# 5. Round-trip percentiles against a Redis stalled for 200 ms.
rl_run($admin, 'SELECT rl_stats_reset()');
my $s = rl_session($node);
rl_run($s, 'SET ratelimit.command_timeout = 5000');
rl_run($s, flood_sql('rtt', 1000, 200));
my ($pid) = rl_run($s, 'SELECT pg_backend_pid()');
$redis->stall;
rl_start($s, flood_sql('rtt', 1000, 1));
# The 200 ms start once the command is out and the backend waits.
ok(defined rl_wait_extension($admin, $pid), 'the call waits on the stalled Redis');
usleep(200_000);
$redis->resume;
my ($one) = rl_finish($s);
is($one, '1|0', 'the stalled call got its answer');
$s->quit;
$st = stats();
ok($st->{round_trips} >= 201, "round trips timed ($st->{round_trips})");
ok($st->{rtt_p999_ms} >= 200, "p99.9 covers the 200 ms stall ($st->{rtt_p999_ms} ms)");
ok($st->{rtt_p50_ms} > 0 && $st->{rtt_p50_ms} < $st->{rtt_p999_ms},
	"p50 below it ($st->{rtt_p50_ms} ms)");
my ($slow) = rl_run($admin,
	'SELECT sum(round_trips) FROM rl_stats_rtt WHERE upper_us > 200000 OR upper_us IS NULL');
ok($slow >= 1, "the histogram holds the slow round trip ($slow)");

# A call that times out (command_timeout 300 ms): one failure, "timeout".
my $t = rl_session($node);
rl_run($t, flood_sql('to', 10, 1));
$redis->stall;
my ($late) = rl_run($t, flood_sql('to', 10, 1));
$redis->resume;
$t->quit;
is($late, '1|0', 'a timed-out call gets the open policy');
$st = stats();
is("$st->{failures}/$st->{failures_timeout}", '1/1', 'the failure is counted as a timeout');

# 6. Key names by role.
$node->safe_psql('postgres', q{
CREATE ROLE regress_rl_mon LOGIN IN ROLE pg_monitor;
CREATE ROLE regress_rl_granted LOGIN;
CREATE ROLE regress_rl_none LOGIN;
GRANT SELECT ON rl_stats_limiters TO regress_rl_granted;
GRANT EXECUTE ON FUNCTION rl_stats_limiters() TO regress_rl_granted;
});
in_sessions([ flood_sql('secret:tenant-42', 1, 3) ]);
ok(defined others_gone(), 'the session exited');
my $q = "SELECT coalesce(key, '<null>') FROM rl_stats_limiters WHERE denied = 2";
like($node->safe_psql('postgres', $q, extra_params => [ '-U', 'regress_rl_mon' ]),
	qr/secret:tenant-42/, 'a pg_monitor member sees the key');
is($node->safe_psql('postgres', $q, extra_params => [ '-U', 'regress_rl_granted' ]),
	'<null>', 'a role granted the view alone sees no key');
my ($rc, $o, $e) = $node->psql('postgres', $q, extra_params => [ '-U', 'regress_rl_none' ]);
like($e, qr/permission denied for view rl_stats_limiters/, 'an ordinary role reads nothing');
($rc, $o, $e) = $node->psql('postgres', 'SELECT rl_stats_reset()',
	extra_params => [ '-U', 'regress_rl_mon' ]);
like($e, qr/permission denied for function rl_stats_reset/, 'pg_monitor may not reset');
$node->safe_psql('postgres', q{
REVOKE SELECT ON rl_stats_limiters FROM regress_rl_granted;
REVOKE EXECUTE ON FUNCTION rl_stats_limiters() FROM regress_rl_granted;
DROP ROLE regress_rl_mon, regress_rl_granted, regress_rl_none;
});

# 7. The reader does not hold the table's lock while it builds its
# result.  3000 limiters denied once each; a reader with work_mem 64 kB,
# whose result (some 400 kB) goes to a temporary file, each write of it
# delayed 50 ms by strace; while it writes, another session with a denial
# pending reads the view, which adds that denial first: the table's lock,
# exclusively.  It must not wait for the reader.
SKIP:
{
	skip 'strace is not installed', 6
	  unless grep { -x "$_/strace" } split /:/, $ENV{PATH} . ':/usr/bin';
	$admin->quit;
	$node->append_conf('postgresql.conf', "ratelimit.stats_max_limiters = 5000\n");
	$node->restart;
	$admin = rl_session($node);
	my $keys = "ARRAY(SELECT 'many:' || g FROM generate_series(1, 3000) g)";
	my $d = rl_session($node);
	rl_run($d, "SELECT count(*) FROM rl_allow_many($keys, 'fixed_window', 1, '1 hour')");
	my ($denied) = rl_run($d,
		"SELECT count(*) FILTER (WHERE NOT allowed) FROM rl_allow_many($keys, 'fixed_window', 1, '1 hour')");
	my ($entries) = rl_run($d, 'SELECT count(*) FROM rl_stats_limiters');
	is("$denied $entries", '3000 3000', 'lock: 3000 limiters denied, 3000 entries');
	$d->quit;

	my $r = rl_session($node);
	my $w = rl_session($node);
	rl_run($r, "SET work_mem = '64kB'");
	my ($rpid) = rl_run($r, 'SELECT pg_backend_pid()');
	rl_run($w, flood_sql('warm', 10, 1));    # a warm link, no denial
	my $trace = PostgreSQL::Test::Utils::tempdir . '/strace.out';
	my ($out, $err) = ('', '');
	my $strace = IPC::Run::start(
		[ 'strace', '-p', $rpid, '-e', 'trace=pwrite64', '-e',
			'inject=pwrite64:delay_enter=50000', '-o', $trace ],
		'<', \undef, '>', \$out, '2>', \$err);
	my $attached = rl_wait_for(sub { $strace->pump_nb; $err =~ /attached/ }, 10);
	if (!defined $attached)
	{
		$strace->kill_kill;
		skip "strace could not attach to the backend: $err", 5;
	}

	my $t0 = time;
	rl_start($r, 'SELECT count(*) FROM rl_stats_limiters()');
	# The reader is writing its result once its first write is done.
	my $writing = rl_wait_for(sub { -s $trace && slurp_file($trace) =~ /pwrite64/ }, 10);
	# One denial, added at its commit or by the read: either way the lock.
	my ($wout, $werr, $wt) = rl_run($w, flood_sql('w', 1, 2)
		  . "; SELECT denied FROM rl_stats_limiters WHERE key LIKE '%:w}:fixed_window:1:3600000ms'");
	my ($rout) = rl_finish($r);
	my $rt = time - $t0;
	$strace->kill_kill;
	ok(defined $writing, 'lock: the reader writes its result to a temporary file, slowly');
	is($rout, '3000', 'lock: the reader read the 3000 entries');
	cmp_ok($rt, '>', 1.0, sprintf('lock: the reader took %.0f ms', $rt * 1000));
	is("$wout$werr", "1|1\n1", 'lock: the other session added its denial and read it');
	cmp_ok($wt, '<', 0.5,
		sprintf('lock: meanwhile, without waiting for the reader (%.0f ms)', $wt * 1000));
	fact('figure.019', sprintf('a reader of 3000 limiters writing its result slowly (%.0f ms): '
			. 'another session added a denial meanwhile in %.0f ms', $rt * 1000, $wt * 1000));
	$r->quit;
	$w->quit;
}

$admin->quit;
$node->stop;
done_testing();
