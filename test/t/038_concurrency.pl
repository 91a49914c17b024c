# test/t/038_concurrency.pl
#
# The concurrency algorithm (issue 25) under real sessions and real time:
#   1. 20 pgbench sessions each wait for a slot of a limit of 3
#      (rl_acquire by a policy), hold it for 10 to 40 ms and commit; every
#      hold is recorded from after its admission to before its commit, so
#      inside the time its slot was held: no instant has more than 3
#      holds, every session is served, and all slots are free at the end;
#   2. a terminated backend (pg_terminate_backend) releases its slot at
#      once, as its transaction aborts; a slot held for the session
#      (rl_hold) stays held across transactions, seen by another session,
#      and is released when its backend exits;
#   3. a holder killed with SIGKILL (the server restarts its backends, no
#      callback runs) frees its slot when its lease ends and not before;
#   4. PgBouncer in transaction mode: 20 clients over 4 server
#      connections, the same bound, each slot released with the
#      transaction that took it, not with the server connection.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis qw(rl_node rl_session rl_run rl_load);

my $redis = RLRedis->new(name => 'r038');
my $node = rl_node('c038', $redis, "ratelimit.deny_cache = off\nrestart_after_crash = on\n");

$node->safe_psql('postgres', q{
INSERT INTO rl_policies (name, algo, "limit", "window")
VALUES ('cc.jobs', 'concurrency', 3, '10 seconds');
CREATE TABLE held (id bigserial PRIMARY KEY, client int, via int,
	s timestamptz, e timestamptz);
});

# The hold of one transaction: a slot, then a recorded interval inside it.
my $hold = q{BEGIN;
SELECT (rl_acquire('job:' || :via, 'cc.jobs', '20 seconds')).allowed::int AS ok \gset
\if :ok
INSERT INTO held (client, via, s) VALUES (:client_id, :via, clock_timestamp()) RETURNING id \gset
SELECT pg_sleep(0.01 + random() * 0.03);
UPDATE held SET e = clock_timestamp() WHERE id = :id;
\endif
COMMIT;};

# The most holds recorded at one instant, the clients served, the holds.
sub overlap
{
	my ($via) = @_;
	return split /\|/, $node->safe_psql('postgres', qq{
SELECT coalesce(max(c), 0), count(DISTINCT client), count(*) FROM (
	SELECT h1.client, (SELECT count(*) FROM held h2 WHERE h2.via = $via
		AND h2.s <= h1.s AND h2.e > h1.s) AS c
	FROM held h1 WHERE h1.via = $via) x});
}

# 1. 20 sessions.
{
	my $stop = rl_load($node, 20, "\\set via 1\n$hold");
	sleep 4;
	my ($clean, $calls, $wrong) = $stop->();
	is($clean, 20, '20 sessions ran until stopped') or diag $wrong;
	my ($most, $served, $holds) = overlap(1);
	note "direct: $calls transactions, $holds holds, at most $most at once, $served clients served";
	is($most, 3, 'never more than 3 holds at one instant, and 3 reached');
	is($served, 20, 'every session was served');
	is($node->safe_psql('postgres', "SELECT remaining FROM rl_peek('job:1', 'cc.jobs')"),
		'3', 'every slot is free once the sessions have committed');
}

# 2. A terminated backend releases its slot as its transaction aborts.
{
	my $s = rl_session($node);
	my ($pid) = rl_run($s, "BEGIN; SELECT pg_backend_pid(); SELECT allowed FROM rl_allow('job:term', 'cc.jobs')");
	($pid) = split /\n/, $pid;
	is($node->safe_psql('postgres', "SELECT remaining FROM rl_peek('job:term', 'cc.jobs')"),
		'2', 'terminate: the slot is held');
	$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid, 5000)");
	is($node->safe_psql('postgres', "SELECT remaining FROM rl_peek('job:term', 'cc.jobs')"),
		'3', 'terminate: the slot is released at once');
	eval { $s->quit };

	my $h = rl_session($node);
	my ($held) = rl_run($h, "SELECT holder IS NOT NULL FROM rl_hold('job:session', 'cc.jobs');
		BEGIN; SELECT 1; COMMIT; SELECT holder IS NOT NULL FROM rl_hold('job:session', 'cc.jobs')");
	is($held, "t\n1\nt", 'session: two slots held over transactions');
	is($node->safe_psql('postgres', "SELECT remaining FROM rl_peek('job:session', 'cc.jobs')"),
		'1', 'session: another session sees them held');
	$h->quit;
	my $left;
	for (1 .. 100)
	{
		$left = $node->safe_psql('postgres', "SELECT remaining FROM rl_peek('job:session', 'cc.jobs')");
		last if $left eq '3';
		usleep(20_000);
	}
	is($left, '3', 'session: the backend\'s exit released both');
}

# 4. PgBouncer in transaction mode (before 3, which restarts the server).
SKIP:
{
	my $pgbouncer = (grep { -x $_ } '/usr/sbin/pgbouncer', '/usr/bin/pgbouncer')[0];
	skip 'pgbouncer is not installed', 5 unless $pgbouncer;
	my $dir = $node->basedir . '/pgbouncer';
	mkdir $dir;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $user = $node->safe_psql('postgres', 'SELECT current_user');
	append_to_file("$dir/users.txt", qq{"$user" ""\n});
	append_to_file("$dir/pgbouncer.ini", qq{[databases]
postgres = host=} . $node->host . ' port=' . $node->port . qq{ dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/users.txt
pool_mode = transaction
default_pool_size = 4
max_client_conn = 100
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
});
	my $h = IPC::Run::start [ $pgbouncer, "$dir/pgbouncer.ini" ],
	  '<', '/dev/null', '>', "$dir/out", '2>', "$dir/err";
	my $up = 0;
	for (1 .. 100)
	{
		my ($rc) = IPC::Run::run [ 'psql', '-XAtq', '-h', '127.0.0.1', '-p', $port,
			'-U', $user, '-c', 'SELECT 1', 'postgres' ], '>', \my $o, '2>', \my $e;
		if ($o && $o =~ /^1/) { $up = 1; last }
		usleep(100_000);
	}
	ok($up, 'pgbouncer is up') or diag slurp_file("$dir/pgbouncer.log");
	append_to_file("$dir/hold.sql", "\\set via 2\n$hold\n");
	my ($out, $err) = ('', '');
	IPC::Run::run [ 'pgbench', '-n', '-c', 20, '-j', 2, '-t', 15, '-f', "$dir/hold.sql",
		'-h', '127.0.0.1', '-p', $port, '-U', $user, 'postgres' ],
	  '<', '/dev/null', '>', \$out, '2>', \$err, IPC::Run::timeout(120);
	unlike($err, qr/aborted|ERROR|FATAL/, 'pgbouncer: 20 clients x 15 transactions ran clean') or diag $err;
	my ($most, $served, $holds) = overlap(2);
	note "pgbouncer: $holds holds, at most $most at once, $served clients served";
	is($most, 3, 'pgbouncer: never more than 3 holds at one instant, and 3 reached');
	is($holds, 300, 'pgbouncer: every transaction got its slot (300)');
	is($node->safe_psql('postgres', "SELECT remaining FROM rl_peek('job:2', 'cc.jobs')"),
		'3', 'pgbouncer: every slot free at the end, the server connections still open');
	$h->kill_kill;
}

# 3. SIGKILL: no callback runs; the slot stays held until its lease ends.
{
	$node->safe_psql('postgres', q{
INSERT INTO rl_policies (name, algo, "limit", "window")
VALUES ('cc.lease', 'concurrency', 1, '4 seconds')});
	my $s = rl_session($node);
	my $t0 = time;
	my ($out) = rl_run($s, "BEGIN; SELECT pg_backend_pid(); SELECT allowed FROM rl_allow('job:kill', 'cc.lease')");
	my $t1 = time;
	my ($pid, $ok) = split /\n/, $out;
	is($ok, 't', 'SIGKILL: the slot was taken');
	kill 'KILL', $pid;
	eval { $s->quit };
	# The server restarts its backends after a SIGKILL.
	$node->poll_query_until('postgres', 'SELECT true') or die 'the server did not come back';
	my $free_at;
	my $held_seen = 0;
	while (time - $t0 < 15)
	{
		my $left = $node->safe_psql('postgres', "SELECT remaining FROM rl_peek('job:kill', 'cc.lease')");
		if ($left eq '1')
		{
			$free_at = time;
			last;
		}
		$held_seen++ if $left eq '0';
		usleep(50_000);
	}
	ok($held_seen > 0, 'SIGKILL: the slot was still held after the server came back');
	ok(defined $free_at, 'SIGKILL: the slot was freed');
	ok(defined $free_at && $free_at >= $t0 + 4 - 0.05,
		sprintf('SIGKILL: not before its lease ended (freed %.2f s after the call; lease 4 s)',
			($free_at // 0) - $t0));
	ok(defined $free_at && $free_at <= $t1 + 4 + 1,
		sprintf('SIGKILL: within a second of the lease\'s end (%.2f s)', ($free_at // 0) - $t1));
}

done_testing();
