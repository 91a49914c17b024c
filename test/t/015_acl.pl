# test/t/015_acl.pl
#
# The least-privilege Redis ACL that README gives (section "Redis ACL"),
# read from README itself: every entry point works as that user, also
# the paths only some calls take (EVAL after NOSCRIPT, a denial's search
# in a sliding log, pruning and emptying the log, rl_reset's DEL).  Then
# each command of the list is taken away in turn and the same exercise
# must fail with an ERROR that names it, which also proves the exercise
# reaches every command on the list.  Finally a key pattern that does not
# cover ratelimit.key_prefix.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use RLRedis qw(rl_node rl_session rl_run fact fault_mark fault_done);

# README's line, as a user would paste it (the TAP suites run from the
# checkout or from a copy of test/ with README.md beside it).
my ($readme) = grep { -f $_ } ('README.md', '../README.md');
die "README.md not found" unless $readme;
my ($acl_line) = grep { /^ACL SETUSER ratelimit / } split /\n/,
  slurp_file($readme);
die "README.md has no line 'ACL SETUSER ratelimit ...'" unless $acl_line;
my @rules = split ' ', $acl_line;
splice(@rules, 0, 3);    # ACL SETUSER ratelimit
@rules = map { $_ eq '>the-password' ? '>acl-pw' : $_ } @rules;
my @commands = map { /^\+([a-z|]+)$/ ? $1 : () } @rules;
my ($pattern) = grep { /^~/ } @rules;
note "README's ACL: @rules";
ok(@commands >= 10, 'README lists the commands: ' . join(' ', @commands));
# Redis 7.0 and later: FCALL, and FUNCTION LOAD where a server lacks the
# library; without them (a line for older servers) EVALSHA serves.
my %granted = map { $_ => 1 } @commands;
my $functions = $granted{fcall} && $granted{'function|load'};
note $functions ? "README's ACL grants Functions" : "README's ACL grants no Functions: EVALSHA";

my $redis = RLRedis->new(name => 'r015');
sub set_user
{
	my (@r) = @_;
	return $redis->cli('ACL', 'SETUSER', 'ratelimit', 'reset', @r);
}
is(set_user(@rules), 'OK', "Redis takes README's ACL line");

my $node = rl_node('c015', $redis, qq{
ratelimit.redis_username = 'ratelimit'
ratelimit.redis_password = 'acl-pw'
});
$node->safe_psql('postgres', q{
CREATE TABLE acl_rows (k int);
CREATE TRIGGER acl_rows_t BEFORE INSERT ON acl_rows
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('k', 'sliding_log', '2', '1 minute');
CREATE TABLE acl_stmt (k int);
CREATE TRIGGER acl_stmt_t AFTER INSERT ON acl_stmt REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('k', 'token_bucket', '5', '1 minute');
});

# Every entry point, as one DO block (it stops at the first error).  The
# real clock makes the scripts call TIME; the pinned one walks a sliding
# log through pruning (two members expired: counted with ZCOUNT) and
# emptying (all expired).
my $run = 0;
sub exercise
{
	my ($tag) = @_;
	$run++;
	# A fixed window in 0.2.0's form (a hash), which a check reads with
	# HMGET and replaces by its string.  0.2.0's own keys have no
	# parameters in their names, so since 0.4.0 no call reads them: the
	# hash is planted under the name of the limiter called below, so
	# that the scripts' HMGET path still runs.
	my $dboid = $node->safe_psql('postgres',
		'SELECT oid FROM pg_database WHERE datname = current_database()');
	$redis->cmd('HSET', "rl:{$dboid:acl:$tag:v020}:fixed_window:2:3600000ms",
		'w', '0', 'n', '1');
	$redis->cmd('PEXPIRE', "rl:{$dboid:acl:$tag:v020}:fixed_window:2:3600000ms", 60000);
	return qq{DO \$rl\$
DECLARE
	a text;
	t0 bigint := 1700000000000;
BEGIN
	FOREACH a IN ARRAY ARRAY['fixed_window', 'sliding_log', 'sliding_counter',
							 'token_bucket', 'leaky_bucket', 'gcra'] LOOP
		FOR i IN 1..3 LOOP
			PERFORM rl_allow('acl:$tag:' || a, a, 2, '1 hour');
		END LOOP;
		PERFORM rl_allow('acl:$tag:' || a, a, 2, '1 hour', 2);
		PERFORM rl_peek('acl:$tag:' || a, a, 2, '1 hour');
		PERFORM rl_reset('acl:$tag:' || a, a, 2, '1 hour');
	END LOOP;
	PERFORM rl_allow('acl:$tag:v020', 'fixed_window', 2, '1 hour');
	PERFORM set_config('ratelimit.test_clock_ms', t0::text, true);
	PERFORM rl_allow('acl:$tag:log', 'sliding_log', 3, '1 second');
	PERFORM set_config('ratelimit.test_clock_ms', (t0 + 100)::text, true);
	PERFORM rl_allow('acl:$tag:log', 'sliding_log', 3, '1 second');
	PERFORM set_config('ratelimit.test_clock_ms', (t0 + 600)::text, true);
	PERFORM rl_allow('acl:$tag:log', 'sliding_log', 3, '1 second');
	PERFORM set_config('ratelimit.test_clock_ms', (t0 + 1200)::text, true);
	PERFORM rl_allow('acl:$tag:log', 'sliding_log', 3, '1 second');
	PERFORM set_config('ratelimit.test_clock_ms', (t0 + 5000)::text, true);
	PERFORM rl_allow('acl:$tag:log', 'sliding_log', 3, '1 second');
	PERFORM set_config('ratelimit.test_clock_ms', '0', true);
	PERFORM rl_allow_layered('acl:$tag', ARRAY[('gcra', 2, '1 minute'),
		('sliding_log', 5, '1 hour')]::rl_rule[]);
	PERFORM rl_peek_layered('acl:$tag', ARRAY[('gcra', 2, '1 minute')]::rl_rule[]);
	PERFORM rl_reset_layered('acl:$tag', ARRAY[('gcra', 2, '1 minute')]::rl_rule[]);
	PERFORM count(*) FROM rl_allow_many(ARRAY['acl:$tag:b1', 'acl:$tag:b2'],
										'token_bucket', 5, '1 minute');
	INSERT INTO acl_rows VALUES ($run);
	INSERT INTO acl_stmt SELECT $run * 10 + g FROM generate_series(1, 3) g;
	PERFORM rl_postgrest_guard('leaky_bucket', 5, '1 minute', 'acl:$tag:guard');
END
\$rl\$};
}

sub status
{
	my ($s) = @_;
	my ($out) = rl_run($s,
		'SELECT failures, fail_open, script_loads FROM rl_status()');
	return split /\|/, $out;
}

# The commands Redis refused since the last ACL LOG RESET (redis-cli
# prints each entry as name/value lines; "object" is the command).
sub refused_commands
{
	my @lines = split /\n/, ($redis->cli('ACL', 'LOG') // '');
	my %seen;
	for my $i (0 .. $#lines - 1)
	{
		$seen{ $lines[ $i + 1 ] } = 1 if $lines[$i] eq 'object';
	}
	return join(' ', sort keys %seen);
}

# 1. README's ACL: everything works, EVAL or FUNCTION LOAD included.
my $mark = fault_mark();
{
	$redis->cli('ACL', 'LOG', 'RESET');
	$redis->cli('SCRIPT', 'FLUSH');
	$redis->cli('FUNCTION', 'FLUSH');
	my $s = rl_session($node);
	my ($out, $err) = rl_run($s, exercise('all'));
	unlike($err, qr/ERROR|WARNING/, "README's ACL: every entry point works")
	  or diag($err);
	my ($failures, $open, $loads) = status($s);
	is($failures, 0, "README's ACL: no failure recorded");
	cmp_ok($loads, '>', 0,
		"README's ACL: the library loaded after FUNCTION FLUSH, or the scripts sent with EVAL after NOSCRIPT");
	like($redis->cli('CLIENT', 'LIST'), qr/ user=ratelimit /,
		'Redis sees the connection as user ratelimit');
	# Only the optional labels were refused (and FCALL, where the line
	# grants no Functions: then EVALSHA serves).
	my $optional = $functions ? 'client\|setname|info' : 'client\|setname|info|fcall';
	like(refused_commands(), qr/^(($optional) ?)*$/,
		'Redis refused only CLIENT SETNAME and INFO, which are optional');
	is($redis->cli('EXISTS', "rl:{" . $node->safe_psql('postgres',
		'SELECT oid FROM pg_database WHERE datname = current_database()')
		. ":public.acl_rows:k='1'}:sliding_log:2:60000ms"), 1,
		'the row trigger wrote its key');
	$s->quit;
}
fault_done("the least-privilege ACL of README", $mark);

# 2. Each command taken away: an ERROR that names it.  Functions taken
# away leave EVALSHA, which works; EVALSHA or EVAL taken away is seen only
# without Functions, so those go too.
$mark = fault_mark();
for my $command (@commands)
{
	my $upper = uc $command;
	my @without = ("-$command");
	push @without, '-fcall' if $functions && $command =~ /^eval(sha)?$/;
	set_user(@rules, @without);
	$redis->cli('SCRIPT', 'FLUSH');
	$redis->cli('FUNCTION', 'FLUSH');
	my $s = rl_session($node);
	my ($out, $err) = rl_run($s, exercise("no_$command"));
	if ($command =~ /^(fcall|function\|load)$/)
	{
		unlike($err, qr/ERROR|WARNING/, "without $upper: every entry point works, with EVALSHA")
		  or diag($err);
		my ($failures, $open) = status($s);
		is("$failures|$open", '0|0', "without $upper: no failure, no policy answer");
		$s->quit;
		next;
	}
	like($err, qr/ERROR:  38000: the Redis user may not run \Q$upper\E\b/,
		"without $upper: ERROR 38000 naming $upper");
	note $err;
	my ($failures, $open) = status($s);
	is($open, 0, "without $upper: no call was let through");
	$s->quit;
}
fact('figure.015', scalar(@commands)
	  . " commands of README's ACL each taken away; each refusal named it"
	  . ($functions ? ' (without FCALL or FUNCTION LOAD, EVALSHA served)' : ''));
set_user(@rules);
fault_done('each command of the ACL taken away', $mark);

# 3. A key pattern that does not cover the prefix.
$mark = fault_mark();
{
	set_user(map { $_ eq $pattern ? '~other:*' : $_ } @rules);
	my $s = rl_session($node);
	my ($out, $err) = rl_run($s,
		q{SELECT allowed FROM rl_allow('acl:keys', 'gcra', 2, '1 minute')});
	like($err, qr/ERROR:  38000: the Redis user may not use the keys under ratelimit\.key_prefix "rl:"/,
		'keys outside the pattern: ERROR 38000 naming the prefix');
	like($err, qr/HINT:  .*~rl:\*/, 'the HINT gives the pattern');
	is($out, '', 'keys outside the pattern: no answer');
	$s->quit;
	set_user(@rules);
}
fault_done('an ACL key pattern that misses ratelimit.key_prefix', $mark);

done_testing();
