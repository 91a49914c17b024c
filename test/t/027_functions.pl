# test/t/027_functions.pl
#
# Redis Functions (issue 16).  On Redis 7.0 and later the extension sends
# FCALL to its library (ratelimit_<id>, loaded with FUNCTION LOAD where
# the server lacks it, once per server), and EVALSHA where the ACL
# refuses Functions.  Counts are exact on every path.
#   1. Functions only: every entry point, and not one EVALSHA or EVAL
#      reaches Redis (INFO commandstats; the old code sent EVALSHA).
#   2. FUNCTION FLUSH: one FUNCTION LOAD, then exact counts, a batch of
#      100 keys included (one load for the batch, not one per key).
#   3. A replica promoted, then FUNCTION FLUSH on it, and the session
#      switched to it: one load, and the replicated count goes on exactly.
#   4. An ACL refusing Functions (-fcall -function): EVALSHA, exact; after
#      SCRIPT FLUSH a batch of 100 keys sends one EVAL, not 100.
#   5. An ACL with FCALL but not FUNCTION LOAD, after FUNCTION FLUSH: the
#      load is refused, the calls go as EVAL/EVALSHA, exact.
#   5b. FUNCTION LOAD refused as unavailable (maxmemory reached): the
#      policy answers, one failure and one WARNING; then one load, exact.
#   6. Redis Cluster: FUNCTION FLUSH on every master, then a batch over
#      all of them: one FUNCTION LOAD per master, exact counts; without
#      Functions (ACL), after SCRIPT FLUSH: one EVAL per master.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

use RLRedis qw(rl_node rl_session rl_run rl_status_of);
use RLCluster;

my @ALGOS = qw(fixed_window sliding_log sliding_counter token_bucket
  leaky_bucket gcra);

my $redis = RLRedis->new(name => 'r027');
my ($major) = split /\./, $redis->version;
plan skip_all => "Redis $major has no Functions" if $major < 7;

my $node = rl_node('c027', $redis, qq{
ratelimit.deny_cache = off
});
my $s = rl_session($node);

# "admitted/calls" of n calls of every algorithm on key k, limit l.
sub counts
{
	my ($sess, $k, $l, $n) = @_;
	my @out;
	for my $algo (@ALGOS)
	{
		my ($c, $err) = rl_run($sess,
			"SELECT count(*) FILTER (WHERE (r).allowed) || '/' || count(*) FROM "
			  . "(SELECT rl_allow('$k', '$algo', $l, '1 hour') AS r "
			  . "FROM generate_series(1, $n)) c");
		push @out, "$algo " . ($c // $err);
	}
	return join(', ', @out);
}

sub want { my ($a, $n) = @_; join(', ', map { "$_ $a/$n" } @ALGOS) }

# Admitted keys of a batch of n keys k1..kn, limit 1.
sub batch
{
	my ($sess, $k, $n, $algo) = @_;
	$algo //= 'token_bucket';
	my ($c, $err) = rl_run($sess,
		"SELECT count(*) FILTER (WHERE allowed) FROM rl_allow_many("
		  . "ARRAY(SELECT '$k' || g FROM generate_series(1, $n) g), '$algo', 1, '1 hour')");
	return $c // $err;
}

sub calls { $_[0]->cmdstat($_[1])->{calls} }

# A batch of n keys of one limiter goes as one script call per 64 keys.
sub ncalls { int(($_[0] + 63) / 64) }

# 1. Functions only.
$redis->cli('CONFIG', 'RESETSTAT');
is(counts($s, 'one', 5, 10), want(5, 10), 'Functions: exactly 5 of 10 admitted, every algorithm');
is(batch($s, 'b1_', 20), 20, 'Functions: a batch of 20 keys admitted');
my ($lay) = rl_run($s, "SELECT allowed FROM rl_allow_layered('lay', "
	  . "ARRAY[('gcra', 2, '1 minute'), ('sliding_log', 5, '1 hour')]::rl_rule[])");
is($lay, 't', 'Functions: a layered check answered');
is(calls($redis, 'evalsha') + calls($redis, 'eval'), 0,
	'Redis 7: not one EVALSHA or EVAL reached Redis');
cmp_ok(calls($redis, 'fcall'), '>=', 6 * 10 + ncalls(20) + 1, 'every check was an FCALL');
is(calls($redis, 'function|load'), 1, 'the library was loaded once (a fresh server)');

# 2. FUNCTION FLUSH: one load, exact counts.
{
	my $before = rl_status_of($s);
	$redis->cli('FUNCTION', 'FLUSH');
	$redis->cli('CONFIG', 'RESETSTAT');
	is(batch($s, 'b2_', 100), 100, 'after FUNCTION FLUSH: a batch of 100 keys admitted');
	is(batch($s, 'b2_', 100), 0, 'and the same 100 keys denied');
	is(counts($s, 'two', 3, 6), want(3, 6), 'after FUNCTION FLUSH: exactly 3 of 6, every algorithm');
	is(calls($redis, 'function|load'), 1, 'after FUNCTION FLUSH: one FUNCTION LOAD for the server');
	is($redis->cmdstat('fcall')->{failed_calls}, ncalls(100),
		'the batch found no function once (its ' . ncalls(100) . ' calls, none run), then ran');
	is(rl_status_of($s)->{script_loads} - $before->{script_loads}, 1, 'rl_status counts one load');
	is(calls($redis, 'evalsha') + calls($redis, 'eval'), 0, 'no EVALSHA or EVAL');
}

# 3. A promoted replica that lost the library.
{
	my $replica = RLRedis->new(
		name => 'r027_replica',
		args => [ '--replicaof', '127.0.0.1', $redis->port ]);
	ok( defined RLRedis::rl_wait_for(
			sub { ($replica->info('replication', 'master_link_status') // '') eq 'up' },
			10),
		'replica in sync');
	is(counts($s, 'fo', 10, 4), want(4, 4), 'fail-over: 4 calls on the primary');
	ok( defined RLRedis::rl_wait_for(
			sub { ($replica->info('replication', 'master_repl_offset') // -1)
				  == ($redis->info('replication', 'master_repl_offset') // -2) },
			10),
		'the replica caught up');
	$replica->cli('REPLICAOF', 'NO', 'ONE');
	$replica->cli('FUNCTION', 'FLUSH');
	$replica->cli('CONFIG', 'RESETSTAT');
	rl_run($s, 'SET ratelimit.redis_port = ' . $replica->port);
	is(counts($s, 'fo', 10, 10), want(6, 10),
		'fail-over: the promoted replica counts on exactly (6 of 10 left)');
	is(calls($replica, 'function|load'), 1, 'fail-over: one FUNCTION LOAD on the new master');
	is(calls($replica, 'evalsha') + calls($replica, 'eval'), 0, 'fail-over: no EVALSHA or EVAL');
	rl_run($s, 'RESET ratelimit.redis_port');
	$replica->stop if $replica->can('stop');
}

# 4. An ACL that refuses Functions: EVALSHA, exact; one EVAL per script.
{
	$redis->cli('ACL', 'SETUSER', 'rl_nofn', 'on', '>pw-nofn', '~rl:*', '+@all',
		'-fcall', '-function');
	my $u = rl_session($node);
	rl_run($u, "SET ratelimit.redis_username = 'rl_nofn'");
	rl_run($u, "SET ratelimit.redis_password = 'pw-nofn'");
	$redis->cli('SCRIPT', 'FLUSH');
	$redis->cli('CONFIG', 'RESETSTAT');
	is(batch($u, 'b4_', 100), 100, 'no Functions: a batch of 100 keys admitted');
	is(calls($redis, 'eval'), 1, 'no Functions: the first call of the batch was an EVAL');
	is(calls($redis, 'evalsha'), ncalls(100) - 1, 'no Functions: the others EVALSHA');
	is($redis->cmdstat('fcall')->{rejected_calls}, ncalls(100),
		'no Functions: the FCALLs were refused (and did not run)');
	is(batch($u, 'b4_', 100), 0, 'no Functions: the same keys denied');
	is(counts($u, 'four', 3, 6), want(3, 6), 'no Functions: exactly 3 of 6, every algorithm');
	is($redis->cmdstat('fcall')->{rejected_calls}, ncalls(100), 'no Functions: no FCALL sent again');

	$redis->cli('SCRIPT', 'FLUSH');
	$redis->cli('CONFIG', 'RESETSTAT');
	is(batch($u, 'b4b_', 100), 100, 'after SCRIPT FLUSH: a batch of 100 new keys admitted');
	is(calls($redis, 'eval'), 1, 'after SCRIPT FLUSH: one EVAL for the batch, not one per key');
	is($redis->cmdstat('evalsha')->{failed_calls}, ncalls(100),
		'after SCRIPT FLUSH: every call of the batch NOSCRIPT');
	is(calls($redis, 'evalsha'), 2 * ncalls(100) - 1,
		'after SCRIPT FLUSH: the rest EVALSHA behind the EVAL');
	is(calls($redis, 'fcall'), 0, 'no FCALL');
	$u->quit;
}

# 5. FCALL allowed, FUNCTION LOAD refused, the library flushed.
{
	$redis->cli('ACL', 'SETUSER', 'rl_noload', 'on', '>pw-noload', '~rl:*', '+@all',
		'-function');
	my $u = rl_session($node);
	rl_run($u, "SET ratelimit.redis_username = 'rl_noload'");
	rl_run($u, "SET ratelimit.redis_password = 'pw-noload'");
	$redis->cli('FUNCTION', 'FLUSH');
	$redis->cli('CONFIG', 'RESETSTAT');
	is(batch($u, 'b5_', 50), 50, 'no FUNCTION LOAD: a batch of 50 keys admitted');
	is(calls($redis, 'eval'), 1, 'no FUNCTION LOAD: one EVAL for the batch');
	is(batch($u, 'b5_', 50), 0, 'no FUNCTION LOAD: the same keys denied');
	is(counts($u, 'five', 2, 4), want(2, 4), 'no FUNCTION LOAD: exactly 2 of 4, every algorithm');
	is($redis->cmdstat('function|load')->{rejected_calls}, 1, 'no FUNCTION LOAD: asked once');
	is($redis->cmdstat('fcall')->{failed_calls}, 2 * ncalls(50),
		'no FUNCTION LOAD: the batch found no function twice, then went as EVAL/EVALSHA');
	$u->quit;
}

# 5b. FUNCTION LOAD refused as unavailable (maxmemory reached): the calls
#     behind it get the policy's answer, one failure and one WARNING per
#     attempt; once memory is back, one load and exact counts.
{
	my $u = rl_session($node);
	my $policy = $redis->cli('CONFIG', 'GET', 'maxmemory-policy');
	$policy = (split /\n/, $policy)[1];
	$redis->cli('FUNCTION', 'FLUSH');
	$redis->cli('CONFIG', 'SET', 'maxmemory-policy', 'noeviction');
	$redis->cli('CONFIG', 'SET', 'maxmemory', '1');
	$redis->cli('CONFIG', 'RESETSTAT');
	my $st0 = rl_status_of($u);
	my ($out, $err) = rl_run($u,
		"SELECT allowed, remaining FROM rl_allow('oom', 'fixed_window', 5, '1 hour')");
	my $st1 = rl_status_of($u);
	is($out, 't|', 'OOM on FUNCTION LOAD: the policy (open) answered');
	is($st1->{failures} - $st0->{failures}, 1, 'OOM on FUNCTION LOAD: one failure for the call');
	is($st1->{fail_open} - $st0->{fail_open}, 1, 'OOM on FUNCTION LOAD: one policy answer');
	my @warnings = $err =~ /WARNING:/g;
	is(scalar(@warnings), 1, 'OOM on FUNCTION LOAD: one WARNING');
	like($err, qr/OOM/, 'OOM on FUNCTION LOAD: the WARNING says what Redis answered');
	is($redis->cmdstat('function|load')->{rejected_calls}, 1,
		'OOM on FUNCTION LOAD: the load was asked once');
	$redis->cli('CONFIG', 'SET', 'maxmemory', '0');
	$redis->cli('CONFIG', 'SET', 'maxmemory-policy', $policy);
	usleep(300_000);    # past retry_interval
	is(counts($u, 'oomk', 2, 4), want(2, 4), 'memory back: exactly 2 of 4, every algorithm');
	is(calls($redis, 'function|load'), 1, 'memory back: loaded once');
	$u->quit;
}

# 6. Redis Cluster: one load per master.
{
	my $rc = RLCluster->new(name => 'c27_');
	my @masters = $rc->masters;
	my $seeds = $rc->seeds;
	my $cnode = rl_node('c027c', $masters[0], qq{
ratelimit.redis_mode = 'cluster'
ratelimit.redis_nodes = '$seeds'
ratelimit.deny_cache = off
});
	my $c = rl_session($cnode);
	is(batch($c, 'c1_', 60), 60, 'cluster: a batch of 60 keys admitted');
	$_->cli('FUNCTION', 'FLUSH') for @masters;
	$_->cli('CONFIG', 'RESETSTAT') for @masters;
	is(batch($c, 'c2_', 60), 60, 'cluster, after FUNCTION FLUSH: a batch of 60 new keys admitted');
	is(batch($c, 'c2_', 60), 0, 'cluster: and denied');
	is(join(',', map { calls($_, 'function|load') } @masters), '1,1,1',
		'cluster: one FUNCTION LOAD on each master');
	is(join(',', map { calls($_, 'evalsha') + calls($_, 'eval') } @masters), '0,0,0',
		'cluster: no EVALSHA or EVAL');
	my $failed = 0;
	$failed += $_->cmdstat('fcall')->{failed_calls} for @masters;
	is($failed, 60, 'cluster: each key of the batch found no function once, none twice');
	$c->quit;

	# Without Functions: after SCRIPT FLUSH one EVAL per master.
	$_->cli('ACL', 'SETUSER', 'rl_nofn', 'on', '>pw-nofn', '~rl:*', '+@all',
		'-fcall', '-function') for $rc->nodes;
	$c = rl_session($cnode);
	rl_run($c, "SET ratelimit.redis_username = 'rl_nofn'");
	rl_run($c, "SET ratelimit.redis_password = 'pw-nofn'");
	is(batch($c, 'c3_', 60), 60, 'cluster without Functions: a batch of 60 keys admitted');
	$_->cli('SCRIPT', 'FLUSH') for @masters;
	$_->cli('CONFIG', 'RESETSTAT') for @masters;
	is(batch($c, 'c4_', 60), 60, 'cluster without Functions, after SCRIPT FLUSH: 60 new keys admitted');
	is(batch($c, 'c4_', 60), 0, 'cluster without Functions: and denied');
	is(join(',', map { calls($_, 'eval') } @masters), '1,1,1',
		'cluster without Functions: one EVAL on each master, not one per key');
	is(join(',', map { calls($_, 'fcall') } @masters), '0,0,0', 'and no FCALL');
	$c->quit;
}

$s->quit;
done_testing();
