# test/t/036_ping.pl
#
# rl_ping(), the verification step: it connects now and has each server
# answer, or raises an ERROR of class 08 that names the server, what
# failed and the setting to fix, whatever ratelimit.failure_mode says.
#   1. standalone: a fresh session (rl_status: not connected) gets one row,
#      the server's product (redis or valkey, by RL_SERVER) and its own
#      version, a round trip; the link stays the session's;
#   2. nothing listening: 08001 at once, the hint naming redis_host and
#      redis_port; tried again at once, whatever retry_interval says;
#   3. a stalled server (SIGSTOP): an open link ends in 08006 after
#      command_timeout, a new one in 08001 after connect_timeout, each
#      hint naming that setting; statement_timeout and pg_cancel_backend
#      end a longer wait at once, on an open link and while connecting;
#   4. a wrong password: 08001, the hint naming the password setting, no
#      secret in any message; an ACL user without PING or INFO is answered
#      (NOPERM is an answer), its product unknown;
#   5. Redis Cluster: one row per master; a killed master (no replica to
#      take over) is the ERROR, naming it; seeds that do not answer name
#      ratelimit.redis_nodes.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis qw(rl_node rl_session rl_run rl_start rl_finish
  rl_wait_extension fact fault_mark fault_done);
use RLCluster;

my $product = $RLRedis::SERVER eq 'valkey' ? 'valkey' : 'redis';
my $redis = RLRedis->new(name => 'r036');
my $port = $redis->port;
my $node = rl_node('c036', $redis);
my $mon = rl_session($node);

# Timeouts of rl_node: connect and command 300 ms, retry 200 ms.
my $timeout = 0.3;
my $margin = 0.7;    # a loaded 2-core CI machine

sub fmt { sprintf('%.0f ms', $_[0] * 1000) }

my $ping_sql = 'SELECT engine, mode, endpoint, server, version, rtt_ms FROM rl_ping()';

# rl_ping in session s: (rows as array refs, stderr, seconds).
sub ping
{
	my ($s) = @_;
	my ($out, $err, $t) = rl_run($s, $ping_sql);
	my @rows = map { [ split /\|/, $_, -1 ] } grep { length } split /\n/, $out;
	return (\@rows, $err, $t);
}

sub backend_pid { (rl_run($_[0], 'SELECT pg_backend_pid()'))[0] }

# A loopback port nothing listens on.
sub free_port
{
	for my $p (map { 16600 + $_ } 0 .. 99)
	{
		return $p if RLRedis::port_free($p);
	}
	die 'no free port';
}

# 1. Standalone, from a fresh session.
my $s1 = rl_session($node);
{
	is((rl_run($s1, 'SELECT connected FROM rl_status()'))[0], 'f',
		'a fresh session: rl_status() says not connected');
	my ($rows, $err, $t) = ping($s1);
	note 'rl_ping on a fresh session: ' . fmt($t);
	is(scalar @$rows, 1, 'standalone: one row');
	my ($engine, $mode, $endpoint, $server, $version, $rtt) = @{ $rows->[0] // [] };
	is("$engine|$mode|$endpoint", "redis|standalone|127.0.0.1:$port",
		'the engine, the mode and the endpoint of the settings');
	is($server, $product, "the product: $product");
	is($version, $redis->version, "its own version ($version)");
	ok(defined $rtt && $rtt > 0 && $rtt < 1000, "a round trip ($rtt ms)");
	fact('figure.036', sprintf('rl_ping: %s %s answered PING in %.3f ms', $server, $version, $rtt));
	is($err, '', 'no message');
	is((rl_run($s1, 'SELECT connected FROM rl_status()'))[0], 't',
		'the link it opened stays the session\'s');
	is((rl_run($s1, "SELECT allowed, remaining FROM rl_allow('p1', 'fixed_window', 5, '1 hour')"))[0],
		't|4', 'a call after it uses that link');
}

# 2. Nothing listens there.
my $mark = fault_mark();
my $dead = free_port();
{
	my $s = rl_session($node);
	rl_run($s, "SET ratelimit.redis_port = $dead");
	my ($rows, $err, $t) = ping($s);
	note "rl_ping, nothing on port $dead: " . fmt($t);
	is(scalar @$rows, 0, 'nothing listens: no row');
	like($err,
		qr/ERROR:  08001: ratelimit cannot use Redis server 127\.0\.0\.1:$dead: could not connect to Redis: Connection refused/,
		'nothing listens: ERROR 08001 naming the server and what failed');
	like($err, qr/HINT:  Start Redis there, or correct ratelimit\.redis_host and ratelimit\.redis_port\./,
		'the hint names the settings to fix');
	like($err, qr/DETAIL:  Until it can, checks get the answer of ratelimit\.failure_mode \("open"\)\./,
		'the detail says what checks get meanwhile');
	ok($t < $margin, 'at once (' . fmt($t) . ')');

	# Not the failure policy: a call is let through, rl_ping is not.
	my ($out, $werr) = rl_run($s, "SELECT allowed, remaining FROM rl_allow('p2', 'fixed_window', 5, '1 hour')");
	is($out, 't|', 'a call meanwhile gets the policy answer (open)');
	rl_run($s, 'SET ratelimit.retry_interval = 60000');
	my ($f0) = rl_run($s, 'SELECT failures FROM rl_status()');
	($rows, $err, $t) = ping($s);
	my ($f1) = rl_run($s, 'SELECT failures FROM rl_status()');
	like($err, qr/ERROR:  08001: /, 'resting after the failure: rl_ping still fails');
	is($f1 - $f0, 1, 'it tried again now, whatever retry_interval says (one more failure recorded)');

	rl_run($s, "RESET ratelimit.redis_port");
	($rows, $err, $t) = ping($s);
	is(scalar @$rows, 1, 'the settings fixed: answered at once');
	$s->quit;
}
fault_done('rl_ping with nothing listening', $mark);

# 3. A stalled server.
$mark = fault_mark();
my $s3 = rl_session($node);
my $s4 = rl_session($node);
my $s5 = rl_session($node);
my $s6 = rl_session($node);
is(scalar @{ (ping($s3))[0] }, 1, 'linked session warmed up');
rl_run($_, 'SET ratelimit.command_timeout = 5000') for ($s4, $s5, $s6);
rl_run($_, 'SET ratelimit.connect_timeout = 5000') for ($s4, $s5, $s6);
is(scalar @{ (ping($s4))[0] }, 1, 'statement_timeout session warmed up');
is(scalar @{ (ping($s6))[0] }, 1, 'cancel session warmed up');
my $s6pid = backend_pid($s6);
$redis->stall;
{
	my ($rows, $err, $t) = ping($s3);
	note 'rl_ping on an open link, stalled: ' . fmt($t);
	like($err, qr/ERROR:  08006: ratelimit cannot use Redis server 127\.0\.0\.1:$port: timed out waiting for Redis reply/,
		'stalled, open link: ERROR 08006');
	like($err, qr/HINT:  .*ratelimit\.command_timeout \(300 ms\)/, 'the hint names command_timeout');
	ok($t >= $timeout - 0.05 && $t < $timeout + $margin,
		'after command_timeout (' . fmt($t) . ')');

	my $s = rl_session($node);
	($rows, $err, $t) = ping($s);
	note 'rl_ping connecting, stalled: ' . fmt($t);
	like($err, qr/ERROR:  08001: ratelimit cannot use Redis server 127\.0\.0\.1:$port: timed out/,
		'stalled, connecting: ERROR 08001');
	like($err, qr/HINT:  .*ratelimit\.connect_timeout is 300 ms/, 'the hint names connect_timeout');
	ok($t >= $timeout - 0.05 && $t < $timeout + $margin,
		'after connect_timeout (' . fmt($t) . ')');
	$s->quit;

	# statement_timeout: on an open link (s4), and while connecting (s5).
	for my $case ([ $s4, 'open link' ], [ $s5, 'connecting' ])
	{
		my ($s, $what) = @$case;
		rl_run($s, "SET statement_timeout = '200ms'");
		($rows, $err, $t) = ping($s);
		note "statement_timeout, $what: " . fmt($t);
		fact('figure.036', "stalled Redis: statement_timeout 200 ms ended rl_ping ($what) after "
			  . fmt($t) . ' (connect and command timeouts 5 s)');
		like($err, qr/ERROR:  57014: canceling statement due to statement timeout/,
			"statement_timeout, $what: ERROR 57014");
		is(scalar @$rows, 0, "statement_timeout, $what: no row");
		ok($t >= 0.15 && $t < 0.2 + $margin, "statement_timeout, $what: ended after ~200 ms (" . fmt($t) . ')');
		rl_run($s, 'RESET statement_timeout');
	}

	# pg_cancel_backend while it waits.
	rl_start($s6, $ping_sql);
	ok(defined rl_wait_extension($mon, $s6pid), 'cancel: rl_ping waits with wait_event Extension');
	my $t0 = time;
	rl_run($mon, "SELECT pg_cancel_backend($s6pid)");
	my ($out, $cerr) = rl_finish($s6);
	$t = time - $t0;
	note 'pg_cancel_backend to ERROR: ' . fmt($t);
	like($cerr, qr/ERROR:  57014: canceling statement due to user request/, 'cancel: ERROR 57014');
	ok($t < $margin, 'cancel: ended promptly (' . fmt($t) . ')');
}
$redis->resume;
fault_done('rl_ping against a stalled Redis', $mark);
{
	my ($rows, $err) = ping($s3);
	is(scalar @$rows, 1, 'resumed: the stalled session is answered again at once');
	($rows, $err) = ping($s6);
	is(scalar @$rows, 1, 'resumed: the cancelled session is answered again');
}

# 4. Credentials.
$mark = fault_mark();
{
	my $secret = 'p036-right-secret';
	my $wrong = 'p036-wrong-secret';
	$redis->cli('CONFIG', 'SET', 'requirepass', $secret);
	$redis->set_auth('-a', $secret, '--no-auth-warning');
	my $s = rl_session($node);
	rl_run($s, "SET ratelimit.redis_password = '$wrong'");
	my ($rows, $err) = ping($s);
	like($err, qr/ERROR:  08001: ratelimit cannot use Redis server 127\.0\.0\.1:$port: Redis refused the connection: WRONGPASS\n/,
		'a wrong password: ERROR 08001, the refusal\'s code only');
	like($err, qr/HINT:  Check ratelimit\.redis_password and ratelimit\.redis_username\./,
		'the hint names the password setting');
	unlike($err, qr/\Q$wrong\E|\Q$secret\E/, 'no password in any message');
	rl_run($s, "SET ratelimit.redis_password = '$secret'");
	($rows, $err) = ping($s);
	is(scalar @$rows, 1, 'the right password: answered');
	$s->quit;
	$redis->cli('CONFIG', 'SET', 'requirepass', '');
	$redis->set_auth();

	# An ACL user with only what the scripts need: no PING, no INFO.
	is($redis->cli('ACL', 'SETUSER', 'p036', 'on', '>acl-036-pw', '~rl:*', '-@all',
			'+fcall', '+evalsha', '+eval', '+time', '+get', '+set'), 'OK', 'an ACL user without PING or INFO');
	$s = rl_session($node);
	rl_run($s, "SET ratelimit.redis_username = 'p036'");
	rl_run($s, "SET ratelimit.redis_password = 'acl-036-pw'");
	($rows, $err) = ping($s);
	is(scalar @$rows, 1, 'ACL without PING: answered (NOPERM is an answer)');
	my ($engine, $mode, $endpoint, $server, $version, $rtt) = @{ $rows->[0] // [] };
	is("$server|$version", '|', 'ACL without INFO: product and version unknown');
	ok(defined $rtt && $rtt > 0, "ACL without PING: a round trip ($rtt ms)");
	is($err, '', 'ACL without PING: no message');
	$s->quit;
	$redis->cli('ACL', 'DELUSER', 'p036');
}
fault_done('rl_ping with wrong credentials', $mark);

$_->quit for ($s1, $s3, $s4, $s5, $s6);

# 5. Redis Cluster: three masters, no replicas, so that a killed master
# stays in the slot map.
$mark = fault_mark();
{
	my $rc = RLCluster->new(name => 'c36_', masters => 3, replicas => 0);
	my @masters = $rc->masters;
	my $seeds = $rc->seeds;
	my $cnode = rl_node('c036c', $masters[0], qq{
ratelimit.redis_mode = 'cluster'
ratelimit.redis_nodes = '$seeds'
});
	my $c = rl_session($cnode);
	my ($rows, $err, $t) = ping($c);
	note 'rl_ping on a cluster: ' . fmt($t);
	is(scalar @$rows, 3, 'cluster: one row per master');
	is(join(',', sort map { $_->[2] } @$rows),
		join(',', sort map { '127.0.0.1:' . $_->port } @masters),
		'cluster: each master of the slot map, once');
	is(scalar(grep { $_->[0] eq 'redis' && $_->[1] eq 'cluster' && $_->[3] eq $product } @$rows), 3,
		"cluster: every row says redis, cluster, $product");
	is(scalar(grep { $_->[5] > 0 } @$rows), 3, 'cluster: a round trip per master');
	is($err, '', 'cluster: no message');

	my $victim = $masters[1];
	my $vport = $victim->port;
	$victim->kill9;
	($rows, $err, $t) = ping($c);
	note 'rl_ping, a master killed: ' . fmt($t);
	like($err, qr/ERROR:  08001: ratelimit cannot use Redis server 127\.0\.0\.1:$vport: could not connect to Redis: Connection refused/,
		'cluster, a master killed: ERROR 08001 naming it');
	like($err, qr/HINT:  The cluster's slot map names this master/, 'the hint says where its address comes from');
	ok($t < $margin, 'at once (' . fmt($t) . ')');

	my $nowhere = free_port();
	rl_run($c, "SET ratelimit.redis_nodes = '127.0.0.1:$nowhere'");
	($rows, $err, $t) = ping($c);
	like($err, qr/ERROR:  08001: ratelimit cannot use Redis server 127\.0\.0\.1:$nowhere: could not connect/,
		'cluster, no seed answers: ERROR 08001 naming the seed');
	like($err, qr/DETAIL:  No node of the cluster gave its slot map/, 'the detail says no map was had');
	like($err, qr/HINT:  Start Redis there, or correct ratelimit\.redis_nodes\./,
		'the hint names ratelimit.redis_nodes');
	$c->quit;
	$cnode->stop;
}
fault_done('rl_ping on a Redis Cluster, a master killed', $mark);

$mon->quit;
done_testing();
