# test/t/013_blackhole.pl
#
# A black-holed network: every packet between PostgreSQL and Redis,
# SYNs included, dropped without a word (a dead router, a firewall that
# drops, a cable pulled: the most common failure in production, and one
# a stopped server does not stage, since its kernel still answers).  The
# suite runs in network namespaces of its own, without root (RLNetns):
# Redis sits behind a router that a blackhole route silences.
#
# It proves that a connect into the black hole and a command on a link
# that falls into it each end within their timeout with the policy's
# answer (open and closed), and rl_status() calls it an outage; that query
# cancel and statement_timeout end such a wait at once; that within
# retry_interval calls are answered at once, with no new attempt each;
# that calls are answered by Redis again within retry_interval of the
# hole being lifted; and that nothing is counted that did not get a
# Redis answer.  That last point needs care: a link dropped with a
# command unacknowledged leaves the kernel retransmitting it once the path
# is back, unless the link is reset (see rl_discard in src/redis/rl_conn.c).

BEGIN
{
	require RLNetns;
	RLNetns::enter_or_skip();
}

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis
  qw(rl_node rl_session rl_run rl_start rl_finish rl_wait_for rl_wait_extension
  rl_status_of fact fault_mark fault_done);

my $net = RLNetns->new;
my $redis = RLRedis->new(
	name => 'r013',
	bind => $net->b_addr,
	wrap => [ $net->in_b ],
	unixsocket => 1);
# rl_node: connect_timeout and command_timeout 300 ms, retry_interval 200 ms.
my $node = rl_node('c013', $redis);
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');
my $mon = rl_session($node);

my $timeout = 0.3;
my $margin = 0.7;    # a loaded 2-core CI machine
my $B = quotemeta($net->b_addr);
my %answered;        # key => calls answered by Redis (all admitted)

sub fmt { sprintf('%.0f ms', $_[0] * 1000) }

sub call_sql
{
	my ($key) = @_;
	return "SELECT allowed, remaining, retry_after_ms FROM "
	  . "rl_allow('$key', 'fixed_window', 10, '1 hour')";
}

# One call; an answer from Redis (remaining known) is counted for the key.
sub call
{
	my ($s, $key) = @_;
	my ($out, $err, $t) = rl_run($s, call_sql($key));
	$answered{$key}++ if $out =~ /^t\|\d+\|0$/;
	return ($out, $err, $t);
}

sub count_of
{
	my ($key) = @_;
	my $n = $redis->fw_used("rl:{$dboid:$key}:fixed_window:10:3600000ms") // '';
	return $n eq '' ? 0 : $n;
}

sub backend_pid { (rl_run($_[0], 'SELECT pg_backend_pid()'))[0] }

# The path works, through the router.
{
	my $s = rl_session($node);
	is((call($s, 'warm'))[0], 't|9|0', 'through the router: a call answered by Redis');
	my ($ep) = rl_run($s, 'SELECT endpoint FROM rl_status()');
	like($ep, qr/^$B:\d+$/, "the extension talks to Redis at $ep");
	$s->quit;
}

# 1. Connecting into the black hole: the SYN is dropped; the call ends
# after connect_timeout with the policy's answer, an outage.
my $mark = fault_mark();
$net->blackhole(1);
for my $mode (qw(open closed))
{
	my $s = rl_session($node);
	rl_run($s, "SET ratelimit.failure_mode = $mode");
	my ($out, $err, $t) = call($s, "conn_$mode");
	note "connect into the black hole, fail $mode: " . fmt($t);
	fact('figure.013', "black-holed connect, fail $mode: policy answer after "
		  . fmt($t) . ' (connect_timeout 300 ms)');
	if ($mode eq 'open')
	{
		is($out, 't||0', 'connect, open: allowed, remaining unknown');
	}
	else
	{
		like($out, qr/^f\|\|\d+$/, 'connect, closed: denied, remaining unknown');
	}
	ok($t >= $timeout - 0.05 && $t < $timeout + $margin,
		"connect, $mode: answered after connect_timeout (" . fmt($t) . ')');
	like($err, qr/WARNING:  08006: Redis server $B:\d+ is unavailable; calls are/,
		"connect, $mode: WARNING 08006 names an unavailable server and the policy");
	my $st = rl_status_of($s);
	is($st->{last_error}, 'timed out connecting to Redis',
		"connect, $mode: rl_status() shows an outage, not a configuration error");
	is($st->{connected}, 'f', "connect, $mode: no connection kept");
	$s->quit;
}
$net->blackhole(0);
fault_done('black-holed network at connect (SYN dropped)', $mark);

# 2. A link that falls into the black hole with a command on it: answered
# after command_timeout by the policy, the link dropped.  Then the hole is
# lifted while the kernel would still retransmit the command: it must not
# reach Redis, or a call answered by the policy (denied, under closed)
# would be counted after all.
$mark = fault_mark();
{
	my %s;
	for my $mode (qw(open closed))
	{
		$s{$mode} = rl_session($node);
		rl_run($s{$mode}, "SET ratelimit.failure_mode = $mode");
		is((call($s{$mode}, "cmd_$mode"))[0], 't|9|0', "established, $mode: first call");
	}
	$net->blackhole(1);
	for my $mode (qw(open closed))
	{
		my ($out, $err, $t) = call($s{$mode}, "cmd_$mode");
		note "command into the black hole, fail $mode: " . fmt($t);
		fact('figure.013', "black-holed command, fail $mode: policy answer after "
			  . fmt($t) . ' (command_timeout 300 ms)');
		if ($mode eq 'open')
		{
			is($out, 't||0', 'command, open: allowed, remaining unknown');
		}
		else
		{
			like($out, qr/^f\|\|\d+$/, 'command, closed: denied, remaining unknown');
		}
		ok($t >= $timeout - 0.05 && $t < $timeout + $margin,
			"command, $mode: answered after command_timeout (" . fmt($t) . ')');
	}
	# Lift it at once, well inside the retransmission window.
	$net->blackhole(0);
	for my $mode (qw(open closed))
	{
		my $st = rl_status_of($s{$mode});
		is($st->{last_error}, 'timed out waiting for Redis reply',
			"command, $mode: rl_status() shows an outage");
		is($st->{connected}, 'f', "command, $mode: the link was dropped");
	}
	# An orphaned socket would retransmit about 0.2, 0.6, 1.4 and 3 s
	# after the send (0.2.0 delivered it at the first of these after the
	# lift): 3.5 s see every one that could still come.
	usleep(3_500_000);
	note 'counts 3.5 s after the hole was lifted: open ' . count_of('cmd_open')
	  . ', closed ' . count_of('cmd_closed');
	is(count_of('cmd_open'), 1,
		'lifted: the timed-out command was not delivered late (fail open)');
	is(count_of('cmd_closed'), 1,
		'lifted: a call denied by the policy was not counted after all (fail closed)');
	usleep(250_000);    # past retry_interval
	for my $mode (qw(open closed))
	{
		is((call($s{$mode}, "cmd_$mode"))[0], 't|8|0',
			"lifted, $mode: the next call is answered by Redis, counted once");
		$s{$mode}->quit;
	}
}
fault_done('black-holed network with a command on the link', $mark);

# 3. Query cancel and statement_timeout end a black-holed wait at once,
# though the Redis timeouts are 5 s.
$mark = fault_mark();
{
	my $s2 = rl_session($node);
	my $s3 = rl_session($node);
	for my $s ($s2, $s3)
	{
		rl_run($s, 'SET ratelimit.command_timeout = 5000');
		rl_run($s, 'SET ratelimit.connect_timeout = 5000');
	}
	is((call($s2, 'cx'))[0], 't|9|0', 'cancel: key warmed up');
	is((call($s3, 'cy'))[0], 't|9|0', 'statement_timeout: key warmed up');
	my $s2pid = backend_pid($s2);
	$net->blackhole(1);

	rl_start($s2, call_sql('cx'));
	ok(defined rl_wait_extension($mon, $s2pid), 'cancel: the backend waits on Redis');
	my $t0 = time;
	rl_run($mon, "SELECT pg_cancel_backend($s2pid)");
	my ($out, $err) = rl_finish($s2);
	my $t = time - $t0;
	note 'pg_cancel_backend in the black hole: ' . fmt($t);
	fact('figure.013', 'black-holed command: pg_cancel_backend to ERROR 57014 in ' . fmt($t));
	like($err, qr/ERROR:  57014: canceling statement due to user request/,
		'cancel: ERROR 57014');
	is($out, '', 'cancel: no row');
	ok($t < 0.5, 'cancel: ended at once (' . fmt($t) . ')');

	# On the open link (s3) and while connecting (s2: the cancel dropped
	# its link).
	for my $case ([ $s3, 'cy', 'open link' ], [ $s2, 'cx', 'connecting' ])
	{
		my ($s, $key, $what) = @$case;
		rl_run($s, "SET statement_timeout = '200ms'");
		my ($out, $err, $t) = call($s, $key);
		note "statement_timeout in the black hole, $what: " . fmt($t);
		fact('figure.013', "black-holed, $what: statement_timeout 200 ms ended the call after "
			  . fmt($t) . ' (Redis timeouts 5 s)');
		like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
			"statement_timeout, $what: ERROR 57014");
		is($out, '', "statement_timeout, $what: no row");
		ok($t >= 0.15 && $t < 0.5,
			"statement_timeout, $what: ended after ~200 ms (" . fmt($t) . ')');
		rl_run($s, 'RESET statement_timeout');
	}
	$net->blackhole(0);
	usleep(3_500_000);    # every retransmission that could still come
	is(count_of('cx'), 1, 'cancel: the cancelled command was not delivered late');
	is(count_of('cy'), 1, 'statement_timeout: the cut-off command was not delivered late');
	$_->quit for ($s2, $s3);
}
fault_done('query cancel and statement_timeout in a black-holed network', $mark);

# 4. retry_interval: after one timed-out attempt, calls are answered by
# the policy at once, with no new attempt, until the interval has passed.
# Then (5) the hole is lifted: calls are answered by Redis again within
# retry_interval.
$mark = fault_mark();
{
	my $d = rl_session($node);
	rl_run($d, 'SET ratelimit.retry_interval = 1000');
	is((call($d, 'ri'))[0], 't|9|0', 'retry_interval: key warmed up');
	$net->blackhole(1);
	my ($out, $err, $t) = call($d, 'ri');
	is($out, 't||0', 'retry_interval: the first call times out (policy answer)');
	my $t_failed = time;
	my $st0 = rl_status_of($d);
	($out, $err, $t) = rl_run($d,
		"SELECT count(*) FILTER (WHERE r.allowed AND r.remaining IS NULL) "
		  . "FROM generate_series(1, 20) g, "
		  . "LATERAL rl_allow('ri', 'fixed_window', 10, '1 hour', 1 + 0 * g) r");
	note '20 calls within retry_interval: ' . fmt($t);
	is($out, 20, 'retry_interval: 20 calls answered by the policy');
	ok($t < 0.2, 'retry_interval: answered at once (' . fmt($t) . ' for 20)');
	my $st = rl_status_of($d);
	is($st->{failures}, $st0->{failures}, 'retry_interval: no new attempt per call');
	is($st->{connects}, $st0->{connects}, 'retry_interval: no new connection per call');
	is($st->{fail_open}, $st0->{fail_open} + 20, 'retry_interval: 20 policy answers counted');
	fault_done('black-holed network: retry_interval honoured', $mark);

	# 5. Lifted: one call every 50 ms until Redis answers.
	$mark = fault_mark();
	$net->blackhole(0);
	my $t_lift = time;
	my ($policy, $back) = (0, undef);
	while (time - $t_lift < 3)
	{
		my ($o) = call($d, 'ri');
		if ($o =~ /^t\|\d+\|0$/)
		{
			$back = time - $t_lift;
			last;
		}
		$policy++;
		usleep(50_000);
	}
	my $since_failure = time - $t_failed;
	note 'lifted: answered by Redis again after '
	  . (defined $back ? fmt($back) : 'never')
	  . " ($policy policy answers first; " . fmt($since_failure)
	  . ' after the failed attempt, retry_interval 1000 ms)';
	fact('figure.013', 'black hole lifted: answered by Redis again after '
		  . (defined $back ? fmt($back) : 'never') . ' (retry_interval 1000 ms)');
	ok(defined $back && $back < 1 + $margin,
		'lifted: calls answered by Redis within retry_interval ('
		  . (defined $back ? fmt($back) : 'never') . ')');
	ok($since_failure >= 0.95, 'lifted: no attempt before retry_interval had passed');
	$d->quit;
}

# Every count equals the calls Redis answered: none lost, none doubled,
# none answered by the policy and counted behind its back.
{
	my ($checked, $wrong) = (0, 0);
	for my $key (sort keys %answered)
	{
		my $n = count_of($key);
		$checked += $answered{$key};
		$wrong += abs($n - $answered{$key});
		is($n, $answered{$key}, "count of $key: $n, the calls answered by Redis");
	}
	for my $key (qw(conn_open conn_closed))
	{
		is(count_of($key), 0, "count of $key: nothing (never reached Redis)");
		$wrong += count_of($key);
	}
	fact('count_checks.013', $checked);
	fact('miscounted.013', $wrong);
}
fault_done('black hole lifted: calls resume, counts exact', $mark);

$mon->quit;
$node->stop;
done_testing();
