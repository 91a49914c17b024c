# test/t/040_servers.pl
#
# The server and its real version (issue 26), against every product
# installed here: Redis (redis-server) and Valkey (valkey-server), each
# whatever RL_SERVER says.
#
# 1. rl_status().server_version names the product and its own version:
#    "redis <redis_version>", "valkey <valkey_version>".  Valkey reports
#    redis_version 7.2.4 whatever it is, so the bare number misnamed it.
# 2. The feature check reads that version: a server of version 7 or later
#    runs every check as an FCALL.
# 3. A server that evicts EVAL-cached scripts (Valkey 8, Redis 7.4 and
#    later: the least recently used beyond 500), with Functions refused by
#    the ACL so that the checks run as EVALSHA: after another client's
#    600 EVALs pushed the extension's scripts out, the next checks get
#    NOSCRIPT, send each script once as EVAL, and are answered by the
#    server, counting on exactly; the failure policy never answers.

use strict;
use warnings;

use File::Spec;
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use RLRedis qw(rl_node rl_session rl_run rl_status_of);

my @ALGOS = qw(fixed_window sliding_log sliding_counter token_bucket
  leaky_bucket gcra);

# True if PROGRAM is on the PATH.
sub installed
{
	my ($program) = @_;
	return grep { -x File::Spec->catfile($_, $program) } File::Spec->path;
}

my @products = grep { installed("$_-server") } qw(redis valkey);
plan skip_all => 'neither redis-server nor valkey-server is installed' unless @products;
note 'not installed here, not tested: ' . join(', ', grep { !installed("$_-server") } qw(redis valkey))
  if @products < 2;

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

sub calls { $_[0]->cmdstat($_[1])->{calls} }

for my $product (@products)
{
	my $redis = RLRedis->new(name => "r040_$product", server => $product);
	my $node = rl_node("c040_$product", $redis, qq{
ratelimit.deny_cache = off
});
	my $s = rl_session($node);
	my $real = $product eq 'valkey'
	  ? $redis->info('server', 'valkey_version')
	  : $redis->info('server', 'redis_version');
	my ($major) = split /\./, $real;

	# 1. The name and the real version.
	$redis->cli('CONFIG', 'RESETSTAT');
	is(counts($s, 'v', 5, 10), want(5, 10), "$product $real: exactly 5 of 10 admitted, every algorithm");
	is(rl_status_of($s)->{server_version}, "$product $real",
		"$product $real: rl_status() names the server and its own version");
	if ($product eq 'valkey')
	{
		note 'Valkey says redis_version ' . $redis->info('server', 'redis_version');
		unlike(rl_status_of($s)->{server_version}, qr/\b7\.2\.4\b/,
			"valkey $real: not the redis_version it reports for compatibility")
		  unless $real eq '7.2.4';
	}

	# 2. Functions, by the real version.
	if ($major >= 7)
	{
		is(calls($redis, 'evalsha') + calls($redis, 'eval'), 0,
			"$product $real: not one EVALSHA or EVAL");
		cmp_ok(calls($redis, 'fcall'), '>=', 6 * 10, "$product $real: every check an FCALL");
	}

	# 3. EVAL-cached scripts evicted under the extension's feet.
  SKIP:
	{
		skip "$product $real keeps every EVAL-cached script (no evicted_scripts)", 6
		  unless defined $redis->info('stats', 'evicted_scripts');
		$redis->cli('ACL', 'SETUSER', 'rl_nofn', 'on', '>pw-nofn', '~rl:*', '+@all',
			'-fcall', '-function');
		my $u = rl_session($node);
		rl_run($u, "SET ratelimit.redis_username = 'rl_nofn'");
		rl_run($u, "SET ratelimit.redis_password = 'pw-nofn'");
		is(counts($u, 'e', 5, 10), want(5, 10),
			"$product $real, EVALSHA: exactly 5 of 10 admitted, every algorithm");

		# Another client's scripts, each run once with EVAL.
		my $flood = join('', map { "EVAL \"return $_\" 0\n" } 1 .. 600);
		IPC::Run::run [ "$product-cli", '-p', $redis->port ], '<', \$flood, '>', \my $out;
		cmp_ok($redis->info('stats', 'evicted_scripts'), '>=', 100,
			"$product $real: 600 EVALs evicted at least 100 scripts");

		my $before = rl_status_of($u);
		$redis->cli('CONFIG', 'RESETSTAT');
		is(counts($u, 'e', 5, 10), want(0, 10),
			"$product $real, after the eviction: the next 10 denied, every algorithm, counts kept");
		is($redis->cmdstat('evalsha')->{failed_calls}, scalar(@ALGOS),
			"$product $real: one NOSCRIPT per script");
		is(calls($redis, 'eval'), scalar(@ALGOS), "$product $real: each script sent again once as EVAL");
		is(rl_status_of($u)->{fail_open} - $before->{fail_open}, 0,
			"$product $real: the server answered every check, not the policy");
		$u->quit;
	}
	$s->quit;
	$node->stop;
	$redis->kill9;
}

done_testing();
