# test/t/003_restart.pl
#
# Redis going away and coming back: down before the first call, killed and
# restarted mid-session (state and script cache lost), links dropped by
# CLIENT KILL or the idle timeout, SCRIPT FLUSH, and thousands of calls
# while Redis is down.  Calls answer by policy only while Redis cannot be
# reached, recover on a new connection without a policy answer when the old
# link was merely closed, never count a call twice, and cost next to
# nothing while Redis is down.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis
  qw(rl_node rl_session rl_run rl_status_of rl_wait_for fact fault_mark
  fault_done);

my $redis = RLRedis->new(name => 'r003');
# Redis 7.0 and later: the extension sends FCALL to its Functions library.
my $functions = (split /\./, $redis->version)[0] >= 7;
my $node = rl_node('c003', $redis);
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

sub fmt { sprintf('%.0f ms', $_[0] * 1000) }

sub call_sql
{
	my ($key, $limit) = @_;
	$limit //= 10;
	return "SELECT allowed, remaining, retry_after_ms FROM "
	  . "rl_allow('$key', 'fixed_window', $limit, '1 hour')";
}

# The fixed-window count Redis holds for KEY (LIMIT per hour, 10 unless given).
sub count_of
{
	my ($key, $limit) = @_;
	$limit //= 10;
	return $redis->fw_used("rl:{$dboid:$key}:fixed_window:$limit:3600000ms");
}

# 1. Redis down before the first call: refused at once, policy answer.
my $mark = fault_mark();
$redis->kill9;
{
	my $s = rl_session($node);
	my ($out, $err, $t) = rl_run($s, call_sql('first'));
	note 'first call, Redis down: ' . fmt($t);
	is($out, 't||0', 'down at first call: fail-open answer');
	ok($t < 0.2, 'down at first call: answered at once (' . fmt($t) . ')');
	like($err, qr/WARNING:  08006: Redis server 127\.0\.0\.1:\d+ is unavailable/,
		'down at first call: WARNING names the endpoint');
	my $st = rl_status_of($s);
	like($st->{last_error}, qr/refused/i, "down at first call: last_error says refused ($st->{last_error})");
	is($st->{fail_open}, 1, 'down at first call: counted as fail_open');
	$s->quit;
}
ok($redis->start, 'Redis restarted on the same port');
fault_done('Redis down before the first call', $mark);

# 2. Killed mid-session, restarted on the same port.
$mark = fault_mark();
my $s = rl_session($node);
is(join(',', map { (rl_run($s, call_sql('mk')))[0] } 1 .. 3),
	't|9|0,t|8|0,t|7|0', 'mid-session: three calls counted');
my $st0 = rl_status_of($s);
$redis->kill9;
{
	my ($out, $err, $t) = rl_run($s, call_sql('mk'));
	note 'call after Redis was killed: ' . fmt($t);
	is($out, 't||0', 'killed: policy answer');
	ok($t < 0.2, 'killed: answered at once (' . fmt($t) . ')');
}
ok($redis->start, 'Redis restarted again');
usleep(250_000);    # past retry_interval
is((rl_run($s, call_sql('mk')))[0], 't|9|0',
	'restarted: next call succeeds, state restarted with the server');
{
	my $st = rl_status_of($s);
	note "connects $st0->{connects} -> $st->{connects}, "
	  . "script_loads $st0->{script_loads} -> $st->{script_loads}";
	ok($st->{connects} > $st0->{connects}, 'restarted: on a new connection');
	# Redis 7.0 and later: the library, loaded once ("Function not
	# found", FUNCTION LOAD, the FCALL again); before, the script as EVAL.
	my ($load, $miss) = $functions ? ('function|load', 'fcall') : ('eval', 'evalsha');
	is($st->{script_loads}, $st0->{script_loads} + 1,
		'restarted: what Redis lost was sent once');
	is($redis->cmdstat($load)->{calls}, 1, "restarted: one \U$load\E in commandstats");
	is($redis->cmdstat($miss)->{failed_calls}, 1,
		"restarted: one \U$miss\E that did not run, in commandstats");
}
fault_done('Redis killed mid-session and restarted (state and scripts lost)', $mark);

# 3. CLIENT KILL: the link is closed while idle; the next call notices
# before sending and reconnects, so no policy answer and no double count.
$mark = fault_mark();
{
	my $before = rl_status_of($s);
	is((rl_run($s, call_sql('ck')))[0], 't|9|0', 'client kill: first call');
	$redis->cli('CLIENT', 'KILL', 'TYPE', 'normal');
	my ($out, $err, $t) = rl_run($s, call_sql('ck'));
	note 'call after CLIENT KILL: ' . fmt($t);
	is($out, 't|8|0', 'client kill: next call answered by Redis');
	my $st = rl_status_of($s);
	is($st->{fail_open}, $before->{fail_open}, 'client kill: no policy answer');
	is($st->{connects}, $before->{connects} + 1, 'client kill: one reconnect');
	is(count_of('ck'), 2, 'client kill: the count is not doubled');
	fact('count_checks.003', 1);
	fact('miscounted.003', abs((count_of('ck') // 0) - 2));
}
fault_done('CLIENT KILL of the idle link', $mark);

# 4. Idle timeout: Redis closes the idle link; the next call reconnects.
$mark = fault_mark();
{
	$redis->cli('CONFIG', 'SET', 'timeout', 1);
	is((rl_run($s, call_sql('idle')))[0], 't|9|0', 'idle timeout: first call');
	my $before = rl_status_of($s);
	usleep(2_500_000);    # (sleep would take whole seconds: 2)
	my ($out) = rl_run($s, call_sql('idle'));
	is($out, 't|8|0', 'idle timeout: next call answered by Redis');
	my $st = rl_status_of($s);
	is($st->{connects}, $before->{connects} + 1,
		'idle timeout: Redis had closed the link, one reconnect');
	is($st->{fail_open}, $before->{fail_open}, 'idle timeout: no policy answer');
	$redis->cli('CONFIG', 'SET', 'timeout', 0);
}
fault_done('idle-timeout disconnect', $mark);

# 5. SCRIPT FLUSH (FUNCTION FLUSH on Redis 7.0 and later): 100 calls all
# answered, one load.
$mark = fault_mark();
{
	my $before = rl_status_of($s);
	$redis->cli('CONFIG', 'RESETSTAT');
	$redis->cli($functions ? 'FUNCTION' : 'SCRIPT', 'FLUSH');
	my ($out) = rl_run($s,
		"SELECT count(*) FILTER (WHERE r.remaining IS NOT NULL) "
		  . "FROM generate_series(1, 100) g, "
		  . "LATERAL rl_allow('sf', 'fixed_window', 1000, '1 hour', 1 + 0 * g) r");
	is($out, 100, 'script flush: all 100 calls answered by Redis');
	my $eval = $redis->cmdstat($functions ? 'function|load' : 'eval');
	my $evalsha = $redis->cmdstat($functions ? 'fcall' : 'evalsha');
	note "load calls $eval->{calls}; script calls $evalsha->{calls}, "
	  . "failed $evalsha->{failed_calls}";
	is($eval->{calls}, 1, 'script flush: exactly one load (EVAL, or FUNCTION LOAD)');
	is($evalsha->{failed_calls}, 1, 'script flush: exactly one NOSCRIPT or "Function not found"');
	is(count_of('sf', 1000), 100, 'script flush: counter equals 100');
	fact('count_checks.003', 100);
	fact('miscounted.003', abs((count_of('sf', 1000) // 0) - 100));
	is(rl_status_of($s)->{script_loads}, $before->{script_loads} + 1,
		'script flush: rl_status counts one script load');
}
fault_done('SCRIPT FLUSH', $mark);
$s->quit;

# 6. Redis down: 5000 calls answer by policy in microseconds each, with a
# bounded number of WARNINGs and every answer counted.
$mark = fault_mark();
{
	my $d = rl_session($node);
	my ($pid) = rl_run($d, 'SELECT pg_backend_pid()');
	$redis->kill9;
	my ($out, $err, $t) = rl_run($d,
		"SELECT count(*) FILTER (WHERE r.allowed AND r.remaining IS NULL) "
		  . "FROM generate_series(1, 5000) g, "
		  . "LATERAL rl_allow('down' || g % 10, 'fixed_window', 10, '1 hour') r");
	note sprintf('5000 calls while down: %s (%.1f us per call)', fmt($t), $t * 1e6 / 5000);
	is($out, 5000, 'down: all 5000 calls answered by policy (fail open)');
	ok($t < 2, 'down: 5000 calls took ' . fmt($t));
	my $st = rl_status_of($d);
	note "failures $st->{failures}, fail_open $st->{fail_open}";
	is($st->{calls}, 5000, 'down: rl_status counts 5000 calls');
	is($st->{fail_open}, 5000, 'down: rl_status counts 5000 fail_open answers');
	ok($st->{failures} >= 1 && $st->{failures} <= int($t / 0.2) + 2,
		"down: one connection attempt per retry_interval ($st->{failures})");
	my $log = slurp_file($node->logfile);
	my $warnings = () =
	  $log =~ /\[$pid\].*WARNING:  Redis server \S+ is unavailable/g;
	note "WARNINGs in the server log for backend $pid: $warnings";
	fact('figure.003', sprintf('Redis down: 5000 calls in %s (%.1f us each), '
		  . '%d connection attempts, %d WARNING(s) logged',
		fmt($t), $t * 1e6 / 5000, $st->{failures}, $warnings));
	ok($warnings >= 1 && $warnings <= 2, "down: $warnings WARNING(s) in the server log");
	$d->quit;
}
fault_done('Redis down: 5000 calls answered by policy', $mark);

$node->stop;
done_testing();
