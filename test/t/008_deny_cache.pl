# test/t/008_deny_cache.pl
#
# The local over-limit cache (ratelimit.deny_cache, on by default).  Off,
# every call on a denied key is a Redis round trip.  On, a backend answers
# a denied limiter itself until the retry time Redis gave has passed, so a
# flood costs Redis one call per backend per retry period, and the cache
# never admits anything Redis would refuse: once the retry time has passed
# the call goes to Redis again and is admitted.  An rl_reset in any
# backend of the server drops every backend's cached denials.  A cached
# denial answers only the same cost, and none survives a change of the
# Redis endpoint or of ratelimit.engine.  In shadow mode a cached denial lets the call through.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

use RLRedis qw(rl_node rl_session rl_run rl_wait_for);

my $redis = RLRedis->new(name => 'r008');
my $node = rl_node('c008', $redis);

# Calls one limiter n times in one statement; (allowed, denied).
sub flood
{
	my ($s, $key, $n, $cost, $window) = @_;
	$cost //= 1;
	$window //= '3 seconds';
	my ($out) = rl_run($s,
		"SELECT count(*) FILTER (WHERE a), count(*) FILTER (WHERE NOT a) FROM "
		  . "(SELECT (rl_allow('$key', 'gcra', 5, '$window', $cost)).allowed AS a "
		  . "FROM generate_series(1, $n)) s");
	return split /\|/, $out;
}

# Script calls that reached Redis (FCALL on Redis 7.0 and later).
sub evalsha_calls { $redis->script_runs }

my $s = rl_session($node);

my ($default) = rl_run($s, 'SHOW ratelimit.deny_cache');
is($default, 'on', 'the deny cache is on by default');

# Off: every call reaches Redis.  A window of an hour: 2000 round trips
# take longer than the 0.6 s after which a 3-second window admits again
# on a busy machine.
rl_run($s, 'SET ratelimit.deny_cache = off');
$redis->cli('CONFIG', 'RESETSTAT');
my ($ok, $no) = flood($s, 'off', 2000, 1, '1 hour');
is("$ok/$no", '5/1995', 'cache off: 5 of 2000 allowed');
is(evalsha_calls(), 2000, 'cache off: 2000 calls reach Redis');

# On: the first denial is remembered until its retry time.
rl_run($s, 'SET ratelimit.deny_cache = on');
$redis->cli('CONFIG', 'RESETSTAT');
($ok, $no) = flood($s, 'on', 2000);
is("$ok/$no", '5/1995', 'cache on: the same 5 of 2000 allowed');
my $calls = evalsha_calls();
ok($calls <= 7, "cache on: Redis saw $calls calls for 2000 (5 admitted + 1 denial)");
my ($cached) = rl_run($s, 'SELECT cached FROM rl_status()');
ok($cached >= 1990, "rl_status().cached counts the local answers ($cached)");

# Shadow mode (ratelimit.enforce off): a cached denial lets the call
# through as Redis's own denials do, and is still counted as a denial.
{
	my ($before) = rl_run($s, "SELECT cached || '/' || denied FROM rl_status()");
	rl_run($s, 'SET ratelimit.enforce = off');
	($ok, $no) = flood($s, 'on', 10);
	is("$ok/$no", '10/0', 'shadow mode: cached denials let the calls through');
	my ($after) = rl_run($s, "SELECT cached || '/' || denied FROM rl_status()");
	my ($c0, $d0) = split m{/}, $before;
	my ($c1, $d1) = split m{/}, $after;
	is($c1 - $c0, 10, 'shadow mode: the 10 answers came from the deny cache');
	is($d1 - $d0, 10, 'shadow mode: and were counted as denials');
	rl_run($s, 'RESET ratelimit.enforce');
}

# A cached answer looks like Redis's: denied, retry counting down.
my ($row) = rl_run($s,
	"SELECT allowed, remaining, retry_after_ms BETWEEN 1 AND 600, reset_after_ms > 0 "
	  . "FROM rl_allow('on', 'gcra', 5, '3 seconds')");
is($row, 'f|0|t|t', 'a cached denial has remaining 0 and a retry within one interval');

# After the retry time the next call goes to Redis and is admitted: the
# cache never refuses beyond what Redis would.
my ($retry) = rl_run($s, "SELECT retry_after_ms FROM rl_allow('on', 'gcra', 5, '3 seconds')");
usleep(($retry + 20) * 1000);
$redis->cli('CONFIG', 'RESETSTAT');
($row) = rl_run($s, "SELECT allowed FROM rl_allow('on', 'gcra', 5, '3 seconds')");
is($row, 't', "after the retry time ($retry ms) the call is admitted");
is(evalsha_calls(), 1, 'and it was asked of Redis');

# A different limit or window is another limiter: it goes to Redis.
$redis->cli('CONFIG', 'RESETSTAT');
rl_run($s, "SELECT * FROM rl_allow('on', 'gcra', 50, '3 seconds')");
is(evalsha_calls(), 1, 'another limit for the same key is asked of Redis');

# rl_reset in this backend forgets the cached denial too.
flood($s, 'reset', 10);
rl_run($s, "SELECT rl_reset('reset', 'gcra', 5, '3 seconds')");
($row) = rl_run($s, "SELECT allowed FROM rl_allow('reset', 'gcra', 5, '3 seconds')");
is($row, 't', 'rl_reset clears the local denial');

# rl_reset in another backend clears this backend's cached denial too.
my $other = rl_session($node);
flood($s, 'elsewhere', 10);
$redis->cli('CONFIG', 'RESETSTAT');
flood($s, 'elsewhere', 10);
is(evalsha_calls(), 0, 'a denied key is answered locally');
rl_run($other, "SELECT rl_reset('elsewhere', 'gcra', 5, '3 seconds')");
($row) = rl_run($s, "SELECT allowed FROM rl_allow('elsewhere', 'gcra', 5, '3 seconds')");
is($row, 't', 'rl_reset in another backend clears the cached denial at once');
is(evalsha_calls(), 1, 'and the call was asked of Redis');

# The same after rl_reset_layered, and for keys the reset did not name:
# any reset on the server drops every cached denial.
flood($s, 'other-key', 10);
rl_run($other, "SELECT rl_reset_layered('unrelated', ARRAY[('gcra', 5, '3 seconds')]::rl_rule[])");
$redis->cli('CONFIG', 'RESETSTAT');
flood($s, 'other-key', 3);
is(evalsha_calls(), 1,
	'after any reset a cached denial is asked of Redis again (once, then cached anew)');
$other->quit;

# A row trigger's denials are cached too: a flood of rows on a denied key
# is answered in the backend, and the rows skipped are exactly Redis's.
rl_run($s,
	"CREATE TABLE flood_rows (k text); "
	  . "CREATE TRIGGER t BEFORE INSERT ON flood_rows FOR EACH ROW "
	  . "EXECUTE FUNCTION rl_throttle('k', 'gcra', '5', '3 seconds', 'skip')");
$redis->cli('CONFIG', 'RESETSTAT');
rl_run($s, "INSERT INTO flood_rows SELECT 'a' FROM generate_series(1, 200)");
($row) = rl_run($s, 'SELECT count(*) FROM flood_rows');
is($row, 5, 'row trigger: 5 of 200 rows written');
$calls = evalsha_calls();
ok($calls <= 7, "row trigger: Redis saw $calls calls for 200 rows");

# A larger cost than the cached denial's goes to Redis: it is denied too,
# but for longer than the cached wait, and the answer says so.
rl_run($s, 'SET ratelimit.deny_cache = on');
flood($s, 'bigger', 10);
$redis->cli('CONFIG', 'RESETSTAT');
my ($wait1) = rl_run($s, "SELECT retry_after_ms FROM rl_allow('bigger', 'gcra', 5, '3 seconds', 1)");
is(evalsha_calls(), 0, 'the same cost is answered from the cache');
my ($wait3) = rl_run($s, "SELECT retry_after_ms FROM rl_allow('bigger', 'gcra', 5, '3 seconds', 3)");
is(evalsha_calls(), 1, 'a larger cost is asked of Redis');
ok($wait3 > $wait1 + 1000,
	"a larger cost reports its own, longer wait ($wait3 ms against $wait1 ms for cost 1)");

# Another Redis is another set of limiters: cached denials do not follow
# a change of endpoint.
{
	my $second = RLRedis->new(name => 'r008b');
	flood($s, 'moved', 10);
	my ($denied) = rl_run($s, "SELECT allowed FROM rl_allow('moved', 'gcra', 5, '3 seconds')");
	is($denied, 'f', 'denied, and cached, on the first Redis');
	my $port = $second->port;
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET ratelimit.redis_port = $port; SELECT pg_reload_conf()");
	my $moved = rl_wait_for(sub {
		my ($p) = rl_run($s, 'SHOW ratelimit.redis_port');
		return $p eq $port;
	}, 10);
	ok(defined $moved, 'the session sees the new port');
	my ($allowed) = rl_run($s, "SELECT allowed FROM rl_allow('moved', 'gcra', 5, '3 seconds')");
	is($allowed, 't', 'after the endpoint changed, the call is the new Redis\'s to answer');
	$node->safe_psql('postgres',
		"ALTER SYSTEM RESET ratelimit.redis_port; SELECT pg_reload_conf()");
	rl_wait_for(sub {
		my ($p) = rl_run($s, 'SHOW ratelimit.redis_port');
		return $p eq $redis->port;
	}, 10);
}

# The local engine's limiters are other limiters too: a denial cached
# under one engine does not answer for the other, either way.
{
	flood($s, 'engine', 10);
	my ($denied) = rl_run($s, "SELECT allowed FROM rl_allow('engine', 'gcra', 5, '3 seconds')");
	is($denied, 'f', 'denied, and cached, on Redis');
	my ($allowed) = rl_run($s, "SET ratelimit.engine = local;\n"
		  . "SELECT allowed FROM rl_allow('engine', 'gcra', 5, '3 seconds')");
	is($allowed, 't', 'on the local engine the key is its own: the cached Redis denial does not answer');
	flood($s, 'engine2', 10);
	($denied) = rl_run($s, "SELECT allowed FROM rl_allow('engine2', 'gcra', 5, '3 seconds')");
	is($denied, 'f', 'denied, and cached, on the local engine');
	($allowed) = rl_run($s, "RESET ratelimit.engine;\n"
		  . "SELECT allowed FROM rl_allow('engine2', 'gcra', 5, '3 seconds')");
	is($allowed, 't', 'back on Redis the key is Redis\'s to answer, not the cached local denial');
}

# Ordinary roles cannot turn it on or off.
my ($out, $err) = rl_run($s,
	"CREATE ROLE plain; SET ROLE plain; SET ratelimit.deny_cache = off; RESET ROLE");
like($err, qr/42501/, 'ratelimit.deny_cache is superuser-only');

# A pinned clock never uses the cache (tests stay exact).
rl_run($s, 'RESET ROLE; SET ratelimit.test_clock_ms = 1800000000000');
$redis->cli('CONFIG', 'RESETSTAT');
flood($s, 'pinned', 100);
is(evalsha_calls(), 100, 'with a pinned clock every call reaches Redis');

$s->quit;
$node->stop;
done_testing();
