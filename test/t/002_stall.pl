# test/t/002_stall.pl
#
# A Redis that stops answering (SIGSTOP: the kernel still accepts
# connections and data, replies never come).  Every call must end within
# its timeout with the failure policy's answer; query cancel,
# statement_timeout, pg_terminate_backend and postmaster death must end a
# wait at once, whatever the Redis timeouts say; a timed-out command's late
# reply must never be taken for a later call's; and signals must not
# restart the wait.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis
  qw(rl_node rl_session rl_run rl_start rl_finish rl_wait_for rl_wait_extension
  proc_alive fact fault_mark fault_done);

my $redis = RLRedis->new(name => 'r002');
my $node = rl_node('c002', $redis);
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');
my $mon = rl_session($node);

# Timeouts in the cluster's configuration: 300 ms each, retry 200 ms.
my $timeout = 0.3;
my $margin = 0.7;    # a loaded 2-core CI machine

sub fmt { sprintf('%.0f ms', $_[0] * 1000) }

sub backend_pid { my ($s) = @_; return (rl_run($s, 'SELECT pg_backend_pid()'))[0] }

sub call_sql
{
	my ($key, $limit) = @_;
	$limit //= 10;
	return "SELECT allowed, remaining, retry_after_ms FROM "
	  . "rl_allow('$key', 'fixed_window', $limit, '1 hour')";
}

# Sessions that need a link opened before the stall.
my $s1 = rl_session($node);
my $s2 = rl_session($node);
my $s3 = rl_session($node);
my $s4 = rl_session($node);
rl_run($_, 'SET ratelimit.command_timeout = 5000') for ($s2, $s3, $s4);
rl_run($_, 'SET ratelimit.connect_timeout = 5000') for ($s2, $s3, $s4);
is((rl_run($s1, call_sql('st')))[0], 't|9|0', 'warm-up call answered');
is((rl_run($s2, call_sql('cx')))[0], 't|9|0', 'cancel key warmed up');
is((rl_run($s3, call_sql('cy')))[0], 't|9|0', 'timeout key warmed up');
my $s4pid = backend_pid($s4);
is((rl_run($s4, call_sql('tx')))[0], 't|9|0', 'terminate key warmed up');
ok(grep({ $_ eq "pg:$dboid:$s4pid" } @{ $redis->client_names }),
	"the backend's Redis client is named pg:<dboid>:<pid>");

my $mark = fault_mark();
$redis->stall;

# 1. Policy answers, each within command_timeout + margin.
{
	my ($out, $err, $t) = rl_run($s1, call_sql('st'));
	note 'fail open while stalled: ' . fmt($t);
	fact('figure.002', 'stalled Redis: fail-open answer after ' . fmt($t)
		  . ' (command_timeout 300 ms)');
	is($out, 't||0', 'stalled, open: allowed with unknown remaining');
	ok($t >= $timeout - 0.05 && $t < $timeout + $margin,
		'stalled, open: answered after command_timeout (' . fmt($t) . ')');

	($out, $err, $t) = rl_run($s1, call_sql('st'));
	note 'within retry_interval: ' . fmt($t);
	is($out, 't||0', 'within retry_interval: policy answer again');
	ok($t < 0.2, 'within retry_interval: answered without waiting (' . fmt($t) . ')');

	rl_run($s1, 'SET ratelimit.failure_mode = closed');
	usleep(250_000);
	($out, $err, $t) = rl_run($s1, call_sql('st'));
	note 'fail closed while stalled: ' . fmt($t);
	like($out, qr/^f\|\|\d+$/, 'stalled, closed: denied with unknown remaining');
	my ($retry) = $out =~ /(\d+)$/;
	ok($retry >= 1 && $retry <= 200, "stalled, closed: retry_after_ms $retry is the retry interval");
	ok($t >= $timeout - 0.05 && $t < $timeout + $margin,
		'stalled, closed: answered after the timeout (' . fmt($t) . ')');

	rl_run($s1, 'SET ratelimit.failure_mode = error');
	usleep(250_000);
	($out, $err, $t) = rl_run($s1, call_sql('st'));
	note 'failure_mode error while stalled: ' . fmt($t);
	like($err, qr/ERROR:  08006: Redis server 127\.0\.0\.1:\d+ is unavailable/,
		'stalled, error mode: ERROR 08006');
	is($out, '', 'stalled, error mode: no row');
	ok($t < $timeout + $margin, 'stalled, error mode: within the timeout (' . fmt($t) . ')');
	rl_run($s1, 'RESET ratelimit.failure_mode');
}
fault_done('Redis stalled (SIGSTOP): open, closed and error answers', $mark);

# 2. pg_cancel_backend on a backend waiting on an open link.
$mark = fault_mark();
my $s2pid = backend_pid($s2);
{
	rl_start($s2, call_sql('cx'));
	my $waited = rl_wait_extension($mon, $s2pid);
	ok(defined $waited, 'cancel: backend waits with wait_event Extension');
	my $t0 = time;
	rl_run($mon, "SELECT pg_cancel_backend($s2pid)");
	my ($out, $err) = rl_finish($s2);
	my $t = time - $t0;
	note 'pg_cancel_backend to error: ' . fmt($t);
	fact('figure.002', 'stalled Redis: pg_cancel_backend to ERROR 57014 in ' . fmt($t));
	like($err, qr/ERROR:  57014: canceling statement due to user request/,
		'cancel: ERROR 57014');
	is($out, '', 'cancel: no row, no fail-open answer');
	ok($t < 0.5, 'cancel: ended promptly (' . fmt($t) . ')');
}
fault_done('pg_cancel_backend while Redis is stalled', $mark);

# 3. statement_timeout beats a 5 s command timeout and fail-open, on an
# open link (s3) and while connecting (s2, whose link the cancel dropped).
$mark = fault_mark();
for my $case ([ $s3, 'cy', 'open link' ], [ $s2, 'cx', 'connecting' ])
{
	my ($s, $key, $what) = @$case;
	rl_run($s, "SET statement_timeout = '200ms'");
	my ($out, $err, $t) = rl_run($s, call_sql($key));
	note "statement_timeout, $what: " . fmt($t);
	fact('figure.002', "stalled Redis: statement_timeout 200 ms ($what) ended the call after "
		  . fmt($t) . ' (command_timeout 5 s)');
	like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
		"statement_timeout, $what: ERROR 57014");
	is($out, '', "statement_timeout, $what: never an allowed row");
	ok($t >= 0.15 && $t < 0.5, "statement_timeout, $what: ended after ~200 ms (" . fmt($t) . ')');
	rl_run($s, 'RESET statement_timeout');
}
fault_done('statement_timeout while Redis is stalled', $mark);

# 4. pg_terminate_backend: the backend goes, and with it its Redis client.
$mark = fault_mark();
{
	rl_start($s4, call_sql('tx'));
	ok(defined rl_wait_extension($mon, $s4pid), 'terminate: backend waits on Redis');
	my $t0 = time;
	rl_run($mon, "SELECT pg_terminate_backend($s4pid)");
	my $gone = rl_wait_for(
		sub {
			(rl_run($mon,
				"SELECT count(*) FROM pg_stat_activity WHERE pid = $s4pid"))[0]
			  eq '0';
		},
		5);
	$gone = time - $t0 if defined $gone;
	note 'pg_terminate_backend to exit: ' . (defined $gone ? fmt($gone) : 'never');
	ok(defined $gone && $gone < 1, 'terminate: backend gone promptly');
	my $exited = rl_wait_for(sub { !proc_alive($s4pid) }, 5);
	$exited = time - $t0 if defined $exited;
	note 'pg_terminate_backend to process exit: ' . (defined $exited ? fmt($exited) : 'never');
	ok(defined $exited && $exited < 1, 'terminate: backend process has exited');
}

$redis->resume;
{
	my $clean = rl_wait_for(
		sub { !grep { $_ eq "pg:$dboid:$s4pid" } @{ $redis->client_names } }, 5);
	ok(defined $clean, "terminate: Redis dropped the terminated backend's client");
}
fault_done('pg_terminate_backend while Redis is stalled', $mark);
usleep(300_000);    # let Redis run what the cut-off calls had sent

# 5. A late reply is never taken for a later call's: A's timed-out
# EVALSHA is answered after SIGCONT, B must still see its own state.
$mark = fault_mark();
my $s5 = rl_session($node);
is((rl_run($s5, call_sql('desync_a', 5)))[0], 't|4|0', 'desync: key A called once');
$redis->stall;
is((rl_run($s5, call_sql('desync_a', 5)))[0], 't||0', 'desync: call A timed out (fail open)');
$redis->resume;
usleep(300_000);    # past retry_interval
is((rl_run($s5, call_sql('desync_b', 100)))[0], 't|99|0',
	'desync: call B after SIGCONT gets its own answer (remaining 99)');
is((rl_run($s5, call_sql('desync_a', 5)))[0], 't|2|0',
	'desync: key A counts the late-applied call once, never replayed');
fault_done('late reply after a command timeout (no desync)', $mark);

# 5b. CLIENT PAUSE beyond the timeout: the call answers by policy; the
# paused EVALSHA may still run once after the pause (its outcome is
# unknown to us), but it is never sent again.
$mark = fault_mark();
{
	is((rl_run($s5, call_sql('pause')))[0], 't|9|0', 'pause: first call');
	$redis->cli('CLIENT', 'PAUSE', 1000, 'WRITE');
	my ($out, $err, $t) = rl_run($s5, call_sql('pause'));
	note 'call during CLIENT PAUSE WRITE: ' . fmt($t);
	is($out, 't||0', 'pause: policy answer');
	ok($t >= $timeout - 0.05 && $t < $timeout + $margin,
		'pause: answered after command_timeout (' . fmt($t) . ')');
	usleep(1_000_000);    # the pause and retry_interval are over
	my $n = $redis->fw_used("rl:{$dboid:pause}:fixed_window:10:3600000ms");
	note "count after the pause: $n";
	ok($n == 1 || $n == 2, "pause: the timed-out call applied at most once ($n)");
	is((rl_run($s5, call_sql('pause')))[0], 't|' . (10 - $n - 1) . '|0',
		'pause: next call counted once on top');
	fact('count_checks.002', 1);
	fact('miscounted.002', ($n == 1 || $n == 2) ? 0 : 1);
}
fault_done('CLIENT PAUSE WRITE beyond command_timeout', $mark);

# 5c. DEBUG SLEEP: the server itself blocks (as under a slow command or a
# fork on a big dataset); the call answers by policy after the timeout,
# and the server serves the next call once it wakes.
$mark = fault_mark();
{
	my $sleeper = $redis->cli_bg('DEBUG', 'SLEEP', '1');
	usleep(100_000);    # the sleep has begun
	my ($out, $err, $t) = rl_run($s5, call_sql('debugsleep'));
	note 'call during DEBUG SLEEP 1: ' . fmt($t);
	is($out, 't||0', 'debug sleep: policy answer');
	ok($t >= $timeout - 0.05 && $t < $timeout + $margin,
		'debug sleep: answered after command_timeout (' . fmt($t) . ')');
	$sleeper->finish;
	usleep(300_000);    # past retry_interval
	my ($after) = rl_run($s5, call_sql('debugsleep'));
	like($after, qr/^t\|[89]\|0$/,
		'debug sleep: served again, the timed-out call counted at most once');
}
fault_done('DEBUG SLEEP beyond command_timeout', $mark);

# 6. The cancelled session answers correctly afterwards, consistent with
# what Redis holds (the cancelled call may have been applied: at most once).
{
	my ($out) = rl_run($s2, call_sql('cx'));
	my ($allowed, $remaining) = split /\|/, $out;
	my $n = $redis->fw_used("rl:{$dboid:cx}:fixed_window:10:3600000ms");
	note "after cancel: remaining $remaining, Redis count $n";
	is($allowed, 't', 'after cancel: next call in the same session allowed');
	is($remaining, 10 - $n, 'after cancel: remaining matches the Redis count');
	ok($n == 2 || $n == 3, "after cancel: cancelled call applied at most once (count $n)");
	fact('count_checks.002', 1);
	fact('miscounted.002', ($n == 2 || $n == 3) && $remaining == 10 - $n ? 0 : 1);
}

# 7. Signal storm: NOTIFY every 50 ms to a listening backend that waits on
# a stalled Redis must not stretch its 1 s command timeout.
$mark = fault_mark();
my $s6 = rl_session($node);
my $notifier = rl_session($node);
rl_run($s6, 'LISTEN storm');
rl_run($s6, 'SET ratelimit.command_timeout = 1000');
is((rl_run($s6, call_sql('storm')))[0], 't|9|0', 'storm: listener warmed up');
$redis->stall;
rl_start(
	$notifier, q{
DO $$
BEGIN
	FOR i IN 1..60 LOOP
		PERFORM pg_notify('storm', i::text);
		COMMIT;
		PERFORM pg_sleep(0.05);
	END LOOP;
END
$$});
usleep(100_000);
{
	my ($out, $err, $t) = rl_run($s6, call_sql('storm'));
	note 'call under a NOTIFY storm: ' . fmt($t);
	fact('figure.002', 'stalled Redis: a 1 s command_timeout under a NOTIFY storm held at '
		  . fmt($t));
	like($out, qr/^t\|\|0/, 'storm: fail-open answer after the timeout');
	ok($t >= 0.95 && $t < 1.5, 'storm: the 1 s timeout held (' . fmt($t) . ')');
	rl_finish($notifier);
	my ($notes) = rl_run($s6, 'SELECT 1');
	my $got = () = ($out . $notes) =~ /Asynchronous notification "storm"/g;
	note "notifications delivered to the listener: $got";
	ok($got >= 10, "storm: the listener was signalled ($got notifications)");
}
$redis->resume;
fault_done('NOTIFY signal storm while Redis is stalled', $mark);

# 8. Postmaster death: a backend waiting on a stalled Redis with a 10 s
# timeout exits within a couple of seconds.
$mark = fault_mark();
my $s7 = rl_session($node);
rl_run($s7, 'SET ratelimit.command_timeout = 10000');
is((rl_run($s7, call_sql('pm')))[0], 't|9|0', 'postmaster death: warmed up');
my $s7pid = backend_pid($s7);
$redis->stall;
rl_start($s7, call_sql('pm'));
ok(defined rl_wait_extension($mon, $s7pid), 'postmaster death: backend waits on Redis');
my $t0 = time;
$node->kill9;
my $exit = rl_wait_for(sub { !proc_alive($s7pid) }, 10);
$exit = time - $t0 if defined $exit;
note 'postmaster kill -9 to backend exit: ' . (defined $exit ? fmt($exit) : 'never');
fact('figure.002', 'stalled Redis: postmaster kill -9 to waiting backend exit in '
	  . (defined $exit ? fmt($exit) : 'never'));
ok(defined $exit && $exit < 2, 'postmaster death: the waiting backend exits promptly');

$redis->resume;
my $left = rl_wait_for(
	sub { !grep { /^pg:/ } @{ $redis->client_names } }, 5);
ok(defined $left, 'postmaster death: no backend keeps a Redis client');
fault_done('postmaster death while Redis is stalled', $mark);

eval { $_->quit } for ($s1, $s2, $s3, $s5, $s6, $notifier, $s7, $mon);
done_testing();
