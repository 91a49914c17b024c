# test/t/007_soak.pl
#
# Load and soak.  pgbench runs 64 clients (-j 4, -M prepared) for
# RL_SOAK_SECONDS (default 30) over 1000 keys and all six algorithms,
# one script per algorithm, with short windows.  It must end with no
# error, and a call answered by the failure policy instead of Redis
# counts as an error (the script divides by zero on a NULL remaining).
# While it runs, Redis has exactly one client per pgbench backend, all
# named after them; afterwards Redis is back to its baseline of clients
# within 2 s; Redis ran exactly one script per call; every key has a TTL
# and the keyspace drains to nothing once the longest TTL has passed.
#
# Then one backend makes 100 000 calls over 100 keys, three times, with
# Redis up and again with Redis stopped (fail open): its resident memory
# must not grow between the second and third run, nor its open file
# descriptors while Redis is down.
#
# Last, a short cluster phase: the same load over a 3-master Redis
# Cluster with a CLUSTER FAILOVER midway, counted exactly once per call.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;

use RLRedis qw(rl_node rl_session rl_run rl_wait_for fact fault_mark fault_done);
use RLCluster;

my $secs = $ENV{RL_SOAK_SECONDS} // 30;
my $clients = 64;

my $redis = RLRedis->new(name => 'r007');
# Long enough timeouts that any policy answer is a failure of the test,
# not a fault it staged.
my $node = rl_node('c007', $redis, qq{
max_connections = 100
ratelimit.command_timeout = 3000
ratelimit.connect_timeout = 3000
});
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

# Every key must be gone 2 s after its longest TTL: two seconds for all
# (the sliding counter keeps its state for two windows, so it gets 1 s;
# the sliding log renews its TTL for one and a half, so it gets 1.333 s).
my %window = (
	fixed_window => '2 seconds',
	sliding_log => '1333 milliseconds',
	sliding_counter => '1 second',
	token_bucket => '2 seconds',
	leaky_bucket => '2 seconds',
	gcra => '2 seconds');
my $max_ttl = 2;
my @files;
for my $algo (sort keys %window)
{
	my $file = $node->basedir . "/soak_$algo.sql";
	PostgreSQL::Test::Utils::append_to_file($file, qq{\\set k random(1, 1000)
SELECT 1 / (remaining IS NOT NULL)::int
FROM rl_allow('soak:' || :k, '$algo', 3, '$window{$algo}');
});
	push @files, '-f', "$file\@1";
}

my $baseline = $redis->info('clients', 'connected_clients');
$redis->cli('CONFIG', 'RESETSTAT');
note "Redis clients before the run (redis-cli itself included): $baseline";

my ($out, $err) = ('', '');
my $t0 = time;
# pgbench names its sessions, for pg_stat_activity (TAP sets PGAPPNAME).
# The deny cache is off so that every call is a script run in Redis,
# which the exactly-once count below compares with pgbench's.
my $bench;
{
	local $ENV{PGAPPNAME} = 'rl_soak';
	local $ENV{PGOPTIONS} = '-c ratelimit.deny_cache=off';
	$bench = IPC::Run::start [
		'pgbench', '-n', '-M', 'prepared', '-c', $clients, '-j', 4, '-T', $secs,
		@files, '-h', $node->host, '-p', $node->port, 'postgres'
	  ],
	  '<', \undef, '>', \$out, '2>', \$err;
}

# Near the end, the clients: Redis's count over its baseline, its
# clients named pg:<dboid>:<pid>, and the pgbench backends, sampled
# until two Redis counts around the other samples agree.
my $at = $secs > 10 ? $secs - 5 : $secs * 0.6;
usleep(1_000_000 * ($at - (time - $t0))) if $at > time - $t0;
my ($during, @named, @pgpids, $keyspace_during);
for (1 .. 5)
{
	my $c1 = $redis->info('clients', 'connected_clients');
	@pgpids = sort split /\n/, $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name = 'rl_soak' "
		  . "AND backend_type = 'client backend'");
	@named = sort map { /^pg:$dboid:(\d+)$/ ? $1 : () } @{ $redis->client_names };
	my $c2 = $redis->info('clients', 'connected_clients');
	$during = $c1 - $baseline;
	last if $c1 == $c2;
	$during = "unsteady ($c1, $c2)";
}
$keyspace_during = $redis->info('keyspace', 'db0') // '';
note "during the run: Redis clients over the baseline $during, "
  . scalar(@named) . ' named pg:<db>:<pid>, ' . scalar(@pgpids) . ' pgbench backends';
is($during, scalar(@pgpids), 'during the run: one Redis client per backend, no more');
fact('figure.007', "soak: Redis clients over the baseline near the end: $during, "
	  . scalar(@pgpids) . ' pgbench backends, ' . scalar(@named) . ' clients named after them');
is(scalar(@pgpids), $clients, "during the run: all $clients pgbench backends there");
is_deeply(\@named, \@pgpids, 'during the run: the Redis clients are exactly those backends');

$bench->finish;
my $rc = $? >> 8;
my $t_end = time;
my $elapsed = $t_end - $t0;

my ($processed) = $out =~ /actually processed: (\d+)/;
my ($failed) = $out =~ /number of failed transactions: (\d+)/;
my ($tps) = $out =~ /tps = ([\d.]+)/;
my $aborted = () = $err =~ /aborted/g;
$processed //= 0;
note sprintf('pgbench: %d clients, %d s, %d calls (%.0f per second), '
	  . '%s failed, %d aborted', $clients, $secs, $processed, $tps // 0,
	$failed // 'n/a', $aborted);
is($rc, 0, 'pgbench exit code 0') or diag $err;
is($failed, 0, 'pgbench: no failed transaction');
unlike($err, qr/ERROR|FATAL|aborted/, 'pgbench: no error, no aborted client') or diag $err;
ok($processed > 0, "pgbench: $processed calls");
fact('figure.007', sprintf('soak: pgbench -c %d -j 4 -M prepared -T %d, six algorithms, '
	  . '1000 keys: %d calls, %.0f per second', $clients, $secs, $processed, $tps // 0));

# Back to the baseline of clients within 2 s of pgbench's exit.
my $gone = rl_wait_for(
	sub { $redis->info('clients', 'connected_clients') == $baseline }, 10);
my $gone_after = defined $gone ? time - $t_end : undef;
note 'Redis clients back to the baseline '
  . (defined $gone_after ? sprintf('%.2f s after pgbench exited', $gone_after) : 'never');
ok(defined $gone_after && $gone_after <= 2,
	'after the run: Redis clients back to the baseline within 2 s');

# Exactly one script run per call: nothing lost, nothing run twice.
my $evalsha = $redis->cmdstat('evalsha');
my $eval = $redis->cmdstat('eval');
my $fcall = $redis->cmdstat('fcall');
my $runs = $redis->script_runs;
note "script runs: fcall $fcall->{calls} (failed $fcall->{failed_calls}), "
  . "evalsha $evalsha->{calls} (failed $evalsha->{failed_calls}), "
  . "eval $eval->{calls}";
is($runs, $processed, 'Redis ran exactly one script per pgbench call');

# Every key has a TTL, during and after the run, and all drain away.
{
	my ($k, $e) = $keyspace_during =~ /keys=(\d+),expires=(\d+)/;
	note "keyspace near the end of the run: $keyspace_during";
	ok(defined $k && $k > 0 && $k == $e, "during the run: all $k keys have a TTL");
	my $ks = $redis->info('keyspace', 'db0') // '';
	($k, $e) = $ks =~ /keys=(\d+),expires=(\d+)/;
	note "keyspace right after the run: $ks";
	ok(!defined $k || $k == $e, 'after the run: every key has a TTL');
	my $drained = rl_wait_for(sub { $redis->cmd('DBSIZE') == 0 }, $max_ttl + 10);
	my $drained_after = defined $drained ? time - $t_end : undef;
	note 'keyspace empty '
	  . (defined $drained_after ? sprintf('%.2f s after the run', $drained_after) : 'never');
	ok(defined $drained_after && $drained_after <= $max_ttl + 2,
		"every key expired within the longest TTL ($max_ttl s) + 2 s of the run");
	my ($kd, $ed) = $keyspace_during =~ /keys=(\d+),expires=(\d+)/;
	fact('figure.007', sprintf('soak: near the end %d keys, %d with a TTL; Redis clients '
		  . 'back to the baseline %s after pgbench exited; keyspace empty %s after',
		$kd // 0, $ed // 0,
		defined $gone_after ? sprintf('%.2f s', $gone_after) : 'never',
		defined $drained_after ? sprintf('%.2f s', $drained_after) : 'never'));
}

fact('calls.007', $processed);
fact('clients.007', $clients);
fact('pgbench_errors.007', ($failed // 1) + $aborted + ($rc ? 1 : 0));
fact('count_checks.007', $processed);
fact('miscounted.007', abs($runs - $processed));

# Memory and descriptors of one backend over repeated runs.
sub vmrss
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/status" or return undef;
	my ($kb) = join('', <$fh>) =~ /^VmRSS:\s+(\d+) kB/m;
	return $kb;
}

sub nfds
{
	my ($pid) = @_;
	opendir my $dh, "/proc/$pid/fd" or return undef;
	my $n = grep { !/^\./ } readdir $dh;
	return $n;
}

my $m = rl_session($node);
my ($mpid) = rl_run($m, 'SELECT pg_backend_pid()');
my $query = q{SELECT count((rl_allow('m' || (g % 100), 'fixed_window', 1000000,
	'1 hour')).allowed) FROM generate_series(1, 100000) g};

# Three runs; (RSS after each in kB, fds before and after, seconds each).
sub three_runs
{
	my ($what, $want) = @_;
	my (@rss, @secs);
	my $fd0 = nfds($mpid);
	for my $i (1 .. 3)
	{
		my ($n, $e, $t) = rl_run($m, $query);
		is($n, $want, "$what, run $i: $want of 100000 calls allowed") or diag $e;
		push @rss, vmrss($mpid);
		push @secs, $t;
	}
	my $fd1 = nfds($mpid);
	note sprintf('%s: VmRSS after each run %s kB; %s s per run; '
		  . 'open fds %d -> %d', $what, join(' / ', @rss),
		join(' / ', map { sprintf('%.2f', $_) } @secs), $fd0, $fd1);
	return (\@rss, $fd0, $fd1, \@secs);
}

{
	my ($rss, $fd0, $fd1, $secs) = three_runs('Redis up', 100000);
	my $growth = $rss->[2] - $rss->[1];
	ok($growth < 2048, "Redis up: RSS grew $growth kB from run 2 to run 3 (< 2 MB)");
	note sprintf('Redis up: %.1f us per call', $secs->[2] * 1e6 / 100000);
	fact('figure.007', sprintf('memory, Redis up: VmRSS %s kB after 3 x 100000 calls '
		  . '(+%d kB run 2 to 3), %.1f us per call', join(' / ', @$rss), $growth,
		$secs->[2] * 1e6 / 100000));
}
{
	my $mark = fault_mark();
	$redis->kill9;
	my ($rss, $fd0, $fd1, $secs) = three_runs('Redis stopped', 100000);
	my $growth = $rss->[2] - $rss->[1];
	ok($growth < 2048, "Redis stopped: RSS grew $growth kB from run 2 to run 3 (< 2 MB)");
	ok($fd1 <= $fd0, "Redis stopped: open fds did not grow ($fd0 -> $fd1)");
	my ($st) = rl_run($m, 'SELECT fail_open, failures FROM rl_status()');
	my ($open, $failures) = split /\|/, $st;
	is($open, 300000, 'Redis stopped: rl_status counts 300000 fail-open answers');
	note sprintf('Redis stopped: %.2f us per call, %d connection attempts',
		$secs->[2] * 1e6 / 100000, $failures);
	fact('figure.007', sprintf('memory, Redis stopped: VmRSS %s kB (+%d kB run 2 to 3), '
		  . '%.2f us per call, open fds %d -> %d', join(' / ', @$rss), $growth,
		$secs->[2] * 1e6 / 100000, $fd0, $fd1));
	fault_done('Redis stopped under 300000 calls (memory, fds)', $mark);
}

# The cluster phase: the same load, shorter, against a 3-master Redis
# Cluster (RLCluster.pm), with a coordinated CLUSTER FAILOVER in its
# middle.  Every call must be answered by Redis (no policy answer, as
# above), and the masters together, old and promoted, must have run
# exactly one script per call: the lost-or-doubled count of check.sh's
# summary.
{
	my $csecs = $ENV{RL_SOAK_CLUSTER_SECONDS} // 8;
	my $cclients = 16;
	my $cl = RLCluster->new(name => 'c07_');
	my $seeds = $cl->seeds;
	$_->cli('CONFIG', 'RESETSTAT') for $cl->nodes;
	my @cfiles;
	for my $algo (qw(fixed_window gcra sliding_counter))
	{
		my $file = $node->basedir . "/csoak_$algo.sql";
		PostgreSQL::Test::Utils::append_to_file($file, qq{\\set k random(1, 1000)
SELECT 1 / (remaining IS NOT NULL)::int
FROM rl_allow('csoak:' || :k, '$algo', 3, '$window{$algo}');
});
		push @cfiles, '-f', "$file\@1";
	}
	my ($cout, $cerr) = ('', '');
	my $mark = fault_mark();
	my $cb;
	{
		local $ENV{PGOPTIONS} = '-c ratelimit.deny_cache=off -c ratelimit.redis_mode=cluster '
		  . "-c ratelimit.redis_nodes=$seeds";
		$cb = IPC::Run::start [
			'pgbench', '-n', '-M', 'prepared', '-c', $cclients, '-j', 2, '-T', $csecs,
			@cfiles, '-h', $node->host, '-p', $node->port, 'postgres'
		  ],
		  '<', \undef, '>', \$cout, '2>', \$cerr;
	}
	usleep(1_000_000 * $csecs / 2);
	my $promoted = $cl->failover(($cl->masters)[0]);
	$cb->finish;
	my $crc = $? >> 8;
	my ($cproc) = $cout =~ /actually processed: (\d+)/;
	$cproc //= 0;
	my $cruns = 0;
	for my $n ($cl->alive)
	{
		$cruns += $n->script_runs;
	}
	is($crc, 0, 'cluster phase: pgbench exit code 0, no policy answer') or diag $cerr;
	ok($cproc > 0, "cluster phase: $cproc calls");
	is($cruns, $cproc, 'cluster phase: the masters ran exactly one script per call, across the fail-over');
	note "cluster phase: $cclients clients, $csecs s, $cproc calls, $cruns script runs, "
	  . 'fail-over to ' . $promoted->port;
	fact('figure.007', sprintf('soak, cluster phase: pgbench -c %d -T %d over 3 masters with a '
		  . 'CLUSTER FAILOVER midway: %d calls, %d script runs', $cclients, $csecs, $cproc, $cruns));
	fact('calls.007', $cproc);
	fact('count_checks.007', $cproc);
	fact('miscounted.007', abs($cruns - $cproc));
	fault_done('cluster fail-over during the soak', $mark);
}

$m->quit;
$node->stop;
done_testing();
