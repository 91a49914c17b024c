# test/t/006_isolation.pl
#
# Who shares a limiter, and who may change or read the settings.
#   - Databases on one server and one Redis (named a, a:b and b, so that
#     names with separators prove nothing) never share a limiter while
#     ratelimit.isolate_databases is on, and do share when it is off.
#   - Every Redis key carries an unambiguous "{<database oid>:" or "{all:"
#     tag; no user key, however it mixes ':', '{', '}' and '%', names
#     another database's limiter, and two user keys never share one.
#   - Two PostgreSQL clusters on one Redis do not share with different
#     key_prefix values (and do with the same one).
#   - An ordinary role can neither change any ratelimit.* setting nor read
#     the Redis password, by any path that needs no SECURITY DEFINER
#     function: SET, set_config, DO, RESET, a function's SET clause, ALTER
#     ROLE / DATABASE / SYSTEM, connection options.  The password never
#     shows in CLIENT LIST or rl_status().
#   - A monitoring role (pg_monitor, pg_read_all_settings), which may read
#     superuser-only settings, sees the password masked by every route:
#     SHOW, current_setting(), pg_settings, pg_show_all_settings(),
#     pg_file_settings, pg_read_file, rl_status().
#   - ratelimit.redis_password_file: the password read from a file only
#     the server's OS user can read authenticates (and wins over
#     redis_password); a reload that switches files reconnects running
#     sessions; a file group or others can read, a missing file and a wrong
#     password are refused with a message naming the setting and never the
#     secret; no file secret reaches the server log.
#   - Those guarantees need the library preloaded (a later load leaves
#     its settings as placeholders until then: readable, and reset by a
#     role's connection options), so without shared_preload_libraries
#     every call is refused with 55000, never answered by policy.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use RLRedis qw(rl_node fact);

my $redis = RLRedis->new(name => 'r006');
my $node = rl_node('c006', $redis);
my ($checks, $miscounted) = (0, 0);

# psql as the superuser or another role: (stdout, stderr).
sub sql
{
	my ($db, $sql, $user) = @_;
	my ($out, $err) = ('', '');
	$node->psql($db, $sql,
		stdout => \$out,
		stderr => \$err,
		on_error_stop => 0,
		extra_params => [ defined $user ? ('-U', $user) : () ]);
	return ($out, $err);
}

# A count that must come out exactly; counted for the closing summary.
sub count_is
{
	my ($got, $want, $name) = @_;
	$checks++;
	$miscounted++ unless defined $got && $got eq $want;
	return is($got, $want, $name);
}

my @dbs = ('a', 'a:b', 'b');
my %oid;
for my $db (@dbs)
{
	$node->safe_psql('postgres', qq{CREATE DATABASE "$db"});
	$node->safe_psql($db, 'CREATE EXTENSION ratelimit');
}
for my $line (split /\n/, $node->safe_psql('postgres',
	'SELECT datname, oid FROM pg_database'))
{
	my ($name, $oid) = split /\|/, $line;
	$oid{$name} = $oid;
}
note join(', ', map { "$_ = $oid{$_}" } @dbs);

# Remaining after one call of cost 1 on a 5-per-hour limiter.
sub take
{
	my ($db, $key, $algo) = @_;
	$algo //= 'fixed_window';
	my ($out, $err) = sql($db,
		"SELECT remaining FROM rl_allow('$key', '$algo', 5, '1 hour')");
	return $out eq '' ? "error: $err" : $out;
}

# The README's key layout, for the 5-per-hour limiters of this file.
sub redis_key
{
	my ($ns, $key, $algo, $prefix) = @_;
	(my $esc = $key) =~ s/%/%25/g;
	$esc =~ s/\}/%7D/g;
	return ($prefix // 'rl:') . "{$ns:$esc}:" . ($algo // 'fixed_window')
	  . ':5:3600000ms';
}

# 1. Isolated (the default): one key, one algorithm, three databases,
# three limiters.
{
	my @got = map { take($_, 'shared') } @dbs, @dbs;
	count_is("@got", '4 4 4 3 3 3',
		'isolated: each database counts its own calls to one key');
	my @keys = sort $redis->scan_all('rl:*');
	is_deeply(\@keys, [ sort map { redis_key($oid{$_}, 'shared') } @dbs ],
		'isolated: one Redis key per database, tagged with its OID');
}

# 2. Shared (isolate_databases = off, from the configuration): the same
# key is one limiter across databases, in its own "all" namespace.
{
	$node->safe_psql('postgres',
		"LOAD 'ratelimit'; ALTER SYSTEM SET ratelimit.isolate_databases = off");
	$node->reload;
	my @got = map { take($_, 'shared') } @dbs;
	count_is("@got", '4 3 2', 'shared: the databases count one limiter together');
	is($redis->fw_used(redis_key('all', 'shared')), 3,
		'shared: one Redis key in the "all" namespace holds all three calls');
	$node->safe_psql('postgres',
		"LOAD 'ratelimit'; ALTER SYSTEM RESET ratelimit.isolate_databases");
	$node->reload;
	@got = map { take($_, 'shared') } @dbs;
	count_is("@got", '2 2 2',
		'isolated again: each database back on its own, untouched limiter');
}

# 3. Keys crafted in database a to reach database b's limiter "victim":
# b's OID as a prefix, braces closing the tag, escapes spelled out, the
# "all" namespace, the algorithm and parameter suffix.
my ($A, $B) = ($oid{a}, $oid{b});
{
	is(take('b', 'victim'), 4, "b's limiter 'victim' called once");
	my @crafted = ("$B:victim", "{$B:victim", "{$B:victim}", "}$B:victim",
		"$B:victim}:fixed_window", "victim}:fixed_window", "}{$B:victim",
		"$A}{$B:victim", "all:victim", "{all:victim}", "%7D{$B:victim",
		"$B%3Avictim", "%25", '%', '}', '%7D', ":$B:victim", "$B:victim:",
		"victim", "x}:fixed_window:5:3600000ms",
		"$B:victim}:fixed_window:5:3600000ms");
	my $sql = join(",\n", map { (my $k = $_) =~ s/'/''/g; "('$k')" } @crafted);
	my ($out, $err) = sql('a', qq{
		SELECT count(*) FILTER (WHERE r.allowed AND r.remaining = 3)
		FROM (VALUES $sql) v(k),
		LATERAL rl_allow(v.k, 'fixed_window', 5, '1 hour', 2) r});
	count_is($out, scalar(@crafted),
		'crafted keys in a: each its own fresh limiter (cost 2 leaves 3)');
	($out) = sql('a', qq{
		SELECT * FROM rl_allow_layered('$B:victim',
			ARRAY[('fixed_window', 5, '1 hour')::rl_rule])});
	# A layered rule is the limiter of its key, algorithm and parameters:
	# the one a's crafted "$B:victim" call above charged 2, not b's.
	like($out, qr/^t\|2\|0\|\d+$/,
		'crafted layered key in a: the limiter of that key in a, not b\'s');
	($out) = sql('b', "SELECT remaining FROM rl_peek('victim', 'fixed_window', 5, '1 hour')");
	count_is($out, 4, "b's limiter untouched by every crafted key");

	my %want = map { redis_key($A, $_) => 1 } @crafted, 'shared';
	my @in_a = $redis->scan_all("rl:{$A:*");
	is_deeply([ sort @in_a ], [ sort keys %want ],
		'crafted keys: exactly the Redis keys the layout gives, all under {<oid of a>:');
	my @in_b = $redis->scan_all("rl:{$B:*");
	is_deeply([ sort @in_b ], [ sort(redis_key($B, 'victim'), redis_key($B, 'shared')) ],
		"b's namespace holds only b's own keys");
}

# 4. Random keys heavy in separators: one Redis key per distinct user key,
# all under a's tag, and reading a Redis key back gives the user key.
{
	my @alphabet = (':', ':', '{', '}', '%', '%7D', '%25', '7D', '25', 'D',
		'a', 'all', $A, $B, '5', "\n", ' ', "\x{e9}");
	my %keys;
	while (keys %keys < 400)
	{
		my $k = join('', map { $alphabet[ int(rand(@alphabet)) ] } 1 .. 1 + int(rand(8)));
		$keys{$k} = 1;
	}
	my @keys = sort keys %keys;
	my $arr = join(', ', map {
		my $k = $_;
		utf8::encode($k);
		"convert_from('\\x" . unpack('H*', $k) . "'::bytea, 'UTF8')" } @keys);
	$redis->cmd('FLUSHALL');
	my ($out, $err) = sql('a', qq{
		SELECT count(*) FILTER (WHERE allowed AND remaining = 4), count(*)
		FROM rl_allow_many(ARRAY[$arr], 'fixed_window', 5, '1 hour')});
	count_is($out, scalar(@keys) . '|' . scalar(@keys),
		'400 random keys: 400 fresh limiters');
	my @rkeys = $redis->scan_all('*');
	count_is(scalar(@rkeys), scalar(@keys), '400 random keys: 400 Redis keys');
	my %want = map { my $k = $_; utf8::encode($k); redis_key($A, $k) => 1 } @keys;
	my @unexpected = grep { !$want{$_} } @rkeys;
	is(scalar(@unexpected), 0, 'every Redis key is the one the layout gives')
	  or diag explain [ @unexpected[ 0 .. 4 ] ];

	# Decode: the tag runs to the first "}", the namespace to the first ":".
	my ($bad, %back) = (0);
	for my $rk (@rkeys)
	{
		my ($ns, $esc, $algo) = $rk =~ /^rl:\{([^:}]*):([^}]*)\}:(.*)$/s;
		$bad++ unless defined $ns && $ns eq $A && $algo eq 'fixed_window:5:3600000ms';
		next unless defined $esc;
		(my $k = $esc) =~ s/%7D/}/g;
		$k =~ s/%25/%/g;
		$back{$k}++;
	}
	is($bad, 0, "every key's tag names database a and nothing else");
	is_deeply([ sort keys %back ],
		[ sort map { my $k = $_; utf8::encode($k); $k } @keys ],
		'every Redis key decodes to exactly one user key, and back');
}

# 5. A second cluster on the same Redis.  Both have a database
# "postgres" with the same OID, so only key_prefix keeps them apart.
{
	my $node2 = rl_node('c006b', $redis, "ratelimit.key_prefix = 'rl2:'\n");
	my $oid1 = $node->safe_psql('postgres',
		"SELECT oid FROM pg_database WHERE datname = 'postgres'");
	my $oid2 = $node2->safe_psql('postgres',
		"SELECT oid FROM pg_database WHERE datname = 'postgres'");
	is($oid1, $oid2, 'both clusters have the same OID for "postgres"');
	my $call = "SELECT remaining FROM rl_allow('cross', 'gcra', 5, '1 hour')";
	my @got = ($node->safe_psql('postgres', $call),
		$node2->safe_psql('postgres', $call),
		$node->safe_psql('postgres', $call),
		$node2->safe_psql('postgres', $call));
	count_is("@got", '4 4 3 3', 'different key_prefix: each cluster its own limiter');
	ok($redis->cmd('EXISTS', redis_key($oid1, 'cross', 'gcra'))
		  && $redis->cmd('EXISTS', redis_key($oid2, 'cross', 'gcra', 'rl2:')),
		'different key_prefix: one key under rl: and one under rl2:');
	my $same = $node2->safe_psql('postgres',
		"SET ratelimit.key_prefix = 'rl:'; $call");
	count_is($same, 2, 'the same key_prefix shares the limiter across clusters');
	$node2->stop;
}

# 6. Ordinary roles and the settings.  The role "plain" owns database a
# (so ALTER DATABASE is its to try) and calls the limiter there.
$node->safe_psql('postgres', q{
	CREATE ROLE plain LOGIN;
	ALTER DATABASE a OWNER TO plain;
});
$node->safe_psql('a', q{
	GRANT CREATE ON SCHEMA public TO plain;
	-- Not executable by PUBLIC since 0.2.0: the application role's grant.
	GRANT EXECUTE ON FUNCTION rl_allow(text, text, bigint, interval, bigint, bigint),
		rl_peek(text, text, bigint, interval, bigint) TO plain;
	-- try(sql): 'ok', or the SQLSTATE of the error it raised.  SECURITY
	-- INVOKER (the default): it runs with the caller's rights.
	CREATE FUNCTION try(sql text) RETURNS text LANGUAGE plpgsql AS $$
	BEGIN
		EXECUTE sql;
		RETURN 'ok';
	EXCEPTION WHEN OTHERS THEN
		RETURN SQLSTATE;
	END
	$$;
});

# The password, set the way the README says (Redis first, then ALTER
# SYSTEM and a reload), and a non-default failure mode and port, which
# an attacker would like to undo.
my $secret = 'Isolation-Secret-7731';
$redis->cmd('CONFIG', 'SET', 'requirepass', $secret);
$redis->set_auth('-a', $secret);
$redis->cmd('AUTH', $secret);
$node->safe_psql('postgres', qq{
	SET log_statement = 'none';
	LOAD 'ratelimit';
	ALTER SYSTEM SET ratelimit.redis_password = '$secret';
	ALTER SYSTEM SET ratelimit.failure_mode = 'closed';
	SELECT pg_reload_conf();
});
sleep 1;

# Every setting (as the superuser lists them), with a value to try.
my %try = (
	'ratelimit.redis_host' => '10.9.9.9',
	'ratelimit.redis_port' => '6390',
	'ratelimit.redis_socket' => '/tmp/evil.sock',
	'ratelimit.redis_db' => '7',
	'ratelimit.redis_username' => 'evil',
	'ratelimit.redis_password' => 'evil',
	'ratelimit.redis_password_file' => '/tmp/evil.pw',
	'ratelimit.trusted_proxy_hops' => '16',
	'ratelimit.connect_timeout' => '1',
	'ratelimit.command_timeout' => '1',
	'ratelimit.failure_mode' => 'open',
	'ratelimit.retry_interval' => '3600000',
	'ratelimit.key_prefix' => 'evil:',
	'ratelimit.isolate_databases' => 'off',
	'ratelimit.test_clock_ms' => '1',
	'ratelimit.deny_cache' => 'on');
my %configured;
my %fixed;    # set at server start: refused with 55P02 before privileges
for my $line (split /\n/, $node->safe_psql('a',
	"LOAD 'ratelimit'; SELECT name, setting, context FROM pg_settings "
	  . "WHERE name LIKE 'ratelimit.%'"))
{
	my ($n, $v, $context) = split /\|/, $line, 3;
	$configured{$n} = $v;
	$fixed{$n} = 1 if $context eq 'postmaster';
}
# The two passwords are never listed in pg_settings; try them too.
my @settings = (sort(keys %configured), 'ratelimit.redis_password',
	'ratelimit.sentinel_password');
my @plain_settings = grep { !/password/ } @settings;
$try{$_} //= 'x' for @settings;
is($configured{'ratelimit.failure_mode'}, 'closed', 'configured: failure_mode closed');
note scalar(@settings) . ' settings: ' . join(' ', @settings);

my @seen;    # everything the ordinary role was shown

# The settings as a role's backend sees them once the library is loaded:
# the names whose value differs from the configured one.
sub changed_after
{
	my ($prelude, $pgoptions) = @_;
	local $ENV{PGOPTIONS} = $pgoptions if $pgoptions;
	my ($out, $err) = sql('a',
		"$prelude;\n"
		  . "SELECT 'call', allowed FROM rl_peek('plain', 'gcra', 5, '1 hour');\n"
		  . "SELECT name, setting FROM pg_settings WHERE name LIKE 'ratelimit.%';\n",
		'plain');
	push @seen, $out, $err;
	my %v = map { split /\|/, $_, 2 } grep { /^ratelimit\./ } split /\n/, $out;
	return ([ map { "$_=" . ($v{$_} // '<none>') }
		  grep { ($v{$_} // '') ne $configured{$_} } sort keys %configured ],
		$out, $err);
}

# 6a. In a backend that has loaded the library: every path is refused.
{
	my @paths = (
		[ 'SET', q{SET %s = %L} ],
		[ 'SET LOCAL', q{SET LOCAL %s = %L} ],
		[ 'set_config', q{SELECT set_config(%L, %L, false)} ],
		[ 'set_config is_local', q{SELECT set_config(%L, %L, true)} ],
		[ 'RESET', q{RESET %s} ],
		[ 'DO', q{DO $d$ BEGIN PERFORM set_config(%L, %L, false); END $d$} ],
		[ 'function SET clause',
			q{CREATE FUNCTION pg_temp.f() RETURNS int LANGUAGE sql SET %s = %L RETURN 1} ],
		[ 'ALTER ROLE SET', q{ALTER ROLE plain SET %s = %L} ],
		[ 'ALTER DATABASE SET', q{ALTER DATABASE a SET %s = %L} ]);
	my @q;
	for my $p (@paths)
	{
		my ($what, $fmt) = @$p;
		for my $name (@settings)
		{
			push @q, "SELECT '$what', '$name', try(format('$fmt', '$name', '$try{$name}'))";
		}
	}
	my ($out, $err) = sql('a',
		"SELECT 'call', allowed FROM rl_peek('plain', 'gcra', 5, '1 hour');\n"
		  . join(";\n", @q) . ";\n", 'plain');
	push @seen, $out, $err;
	my @rows = grep { !/^call\|/ } split /\n/, $out;
	my @wrong = grep {
		my ($what, $name, $code) = split /\|/;
		!($code eq '42501' || ($fixed{$name} && $code eq '55P02'))
	} @rows;
	is(scalar(@rows), @paths * @settings,
		'library loaded: ' . scalar(@rows) . ' attempts ('
		  . scalar(@paths) . ' paths x ' . scalar(@settings) . ' settings)');
	is(scalar(@wrong), 0, 'library loaded: every attempt refused with 42501')
	  or diag join("\n", @wrong[ 0 .. ($#wrong > 9 ? 9 : $#wrong) ]);

	# ALTER SYSTEM cannot run inside a function; one statement each.
	($out, $err) = sql('a', "\\set VERBOSITY verbose\n"
		  . join(";\n", map { "ALTER SYSTEM SET $_ = '$try{$_}'" } @settings) . ";\n",
		'plain');
	push @seen, $out, $err;
	my $refused = () = $err =~ /ERROR:  42501: (?:permission denied to set parameter|must be superuser)/g;
	is($refused, scalar(@settings), "ALTER SYSTEM: refused for all $refused settings")
	  or diag "stdout: $out\nstderr: $err";

	my ($changed) = changed_after('SELECT 1');
	is_deeply($changed, [], 'after all that, every setting is as configured');
}

# 6b. In a fresh session, before any rl_ call: the settings exist (the
# postmaster loaded the library), so every attempt is refused at once and
# the configured values stay.
{
	my $sets = join(";\n", map { "SET $_ = '$try{$_}'" } @plain_settings);
	my $calls = join(";\n",
		map { "SELECT 'set', set_config('$_', '$try{$_}', false)" } @plain_settings);
	my $local = "BEGIN;\n"
	  . join(";\n", map { "SET LOCAL $_ = '$try{$_}'" } @plain_settings)
	  . ";\nROLLBACK";
	for my $case ([ 'SET', $sets ], [ 'set_config', $calls ],
		[ 'SET LOCAL', $local ])
	{
		my ($what, $prelude) = @$case;
		my ($changed, $out, $err) = changed_after($prelude);
		is_deeply($changed, [],
			"fresh session, $what: the configured values stay")
		  or diag "$out\n$err";
		like($err, qr/ERROR:  permission denied to set parameter "ratelimit\./,
			"fresh session, $what: refused with an error");
	}

	# Stored settings are checked when stored.
	my ($out, $err) = sql('a', join(";\n",
		map { "SELECT '$_', try('ALTER ROLE plain SET $_ = ''$try{$_}''')"
			. " || try('ALTER DATABASE a SET $_ = ''$try{$_}''')"
			. " || try('CREATE FUNCTION pg_temp.g() RETURNS int LANGUAGE sql "
			. "SET $_ = ''$try{$_}'' RETURN 1')" } @settings), 'plain');
	push @seen, $out, $err;
	my @wrong = grep {
		my ($name, $codes) = split /\|/;
		!($codes =~ /^(?:42501){3}$/ || ($fixed{$name} && $codes =~ /^(?:42501|55P02){3}$/))
	} split /\n/, $out;
	is(scalar(@wrong), 0, 'ALTER ROLE SET, ALTER DATABASE SET '
		  . 'and a function SET clause refused (42501) for every setting')
	  or diag "$out\n$err";
	is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_db_role_setting, unnest(setconfig) c "
		  . "WHERE c LIKE 'ratelimit.%'"), 0,
		'no ratelimit.* setting stored for a role or database');

	# Connection options: with the library preloaded the settings exist
	# when the startup packet is read, so a role's option is refused and
	# the connection with it.
	my $opts = '-c ratelimit.failure_mode=open -c ratelimit.redis_port=6390';
	my ($changed, $out2, $err2) = changed_after('SELECT 1', $opts);
	push @seen, $out2, $err2;
	like($err2, qr/permission denied to set parameter "ratelimit\./,
		'connection options naming a ratelimit setting are refused');
	unlike($out2, qr/^call\|/m, 'and no call is served under them');
	($changed) = changed_after('SELECT 1');
	is_deeply($changed, [], 'the configured values stay in the next session');
}

# 6c. Reading the password, in a backend that has loaded the library.
{
	my ($out, $err) = sql('a', q{
		SELECT 'call', allowed FROM rl_peek('plain', 'gcra', 5, '1 hour');
		SELECT 'show', try('SHOW ratelimit.redis_password');
		SELECT 'current_setting', try($$SELECT current_setting('ratelimit.redis_password')$$);
		SELECT 'current_setting missing_ok', try($$SELECT current_setting('ratelimit.redis_password', true)$$);
		SELECT 'pg_settings', count(*) FROM pg_settings WHERE name = 'ratelimit.redis_password';
		SELECT 'pg_show_all_settings', count(*) FROM pg_show_all_settings() WHERE name = 'ratelimit.redis_password';
		SELECT 'pg_file_settings', try('SELECT * FROM pg_file_settings');
		SELECT 'pg_read_file', try($$SELECT pg_read_file('postgresql.auto.conf')$$);
		SELECT 'rl_status', try('SELECT * FROM rl_status()');
		SELECT 'rl_reset', try($$SELECT rl_reset('plain', 'gcra', 5, '1 hour')$$);
		SELECT 'rl_reset_layered', try($$SELECT rl_reset_layered('plain', ARRAY[('gcra', 5, '1 hour')::rl_rule])$$);
		CREATE FUNCTION pw() RETURNS text LANGUAGE sql
			RETURN current_setting('ratelimit.redis_password');
		SELECT 'invoker function', try('SELECT pw()');
		SHOW ALL;
		SELECT * FROM pg_settings WHERE name LIKE 'ratelimit.%';
		SELECT * FROM pg_db_role_setting;
	}, 'plain');
	push @seen, $out, $err;
	my %r = map { split /\|/, $_, 2 } grep { /^[a-z_ ]+\|/ } split /\n/, $out;
	is($r{call}, 't', 'the role is served by Redis (with the configured password)');
	is($r{show}, '42501', 'password: SHOW refused');
	is($r{current_setting}, '42501', 'password: current_setting refused');
	is($r{'current_setting missing_ok'}, '42501',
		'password: current_setting(missing_ok) refused');
	is($r{pg_settings}, '0', 'password: not in pg_settings');
	is($r{pg_show_all_settings}, '0', 'password: not in pg_show_all_settings()');
	is($r{pg_file_settings}, '42501', 'password: pg_file_settings refused');
	is($r{pg_read_file}, '42501', 'password: postgresql.auto.conf not readable');
	is($r{'invoker function'}, '42501', 'password: refused inside a function too');
	is($r{rl_status}, '42501', 'rl_status() not executable');
	is($r{rl_reset}, '42501', 'rl_reset() not executable');
	is($r{rl_reset_layered}, '42501', 'rl_reset_layered() not executable');
	my @leaks = grep { /\Q$secret\E/ } @seen;
	is(scalar(@leaks), 0, 'the password is in nothing the role was shown ('
		  . scalar(@seen) . ' outputs)');
}

# 6c'. A monitoring role.  Members of pg_read_all_settings (pg_monitor
# is one) may read superuser-only settings, so 0.1.0 showed them the
# password with SHOW and current_setting(); it is now masked for every
# role.  The role is also granted rl_status(), as a monitoring role may be.
$node->safe_psql('postgres',
	'CREATE ROLE monitor LOGIN IN ROLE pg_monitor, pg_read_all_settings');
$node->safe_psql('a', q{
	GRANT EXECUTE ON FUNCTION rl_status() TO monitor;
	-- shown(sql): the first column of the first row, or the SQLSTATE.
	CREATE FUNCTION shown(sql text) RETURNS text LANGUAGE plpgsql AS $$
	DECLARE
		v text;
	BEGIN
		EXECUTE sql INTO v;
		RETURN coalesce(v, '<null>');
	EXCEPTION WHEN OTHERS THEN
		RETURN SQLSTATE;
	END
	$$;
});
my $monitor_reads = q{
	SELECT 'show', shown('SHOW ratelimit.redis_password');
	SELECT 'current_setting', shown($$SELECT current_setting('ratelimit.redis_password')$$);
	SELECT 'missing_ok', shown($$SELECT current_setting('ratelimit.redis_password', true)$$);
	SELECT 'pg_settings', count(*) FROM pg_settings WHERE name = 'ratelimit.redis_password';
	SELECT 'pg_show_all_settings', count(*) FROM pg_show_all_settings() WHERE name = 'ratelimit.redis_password';
	SELECT 'pg_file_settings', shown($$SELECT string_agg(name || '=' || setting, ',') FROM pg_file_settings$$);
	SELECT 'auto.conf', shown($$SELECT pg_read_file('postgresql.auto.conf')$$);
	SELECT 'auto.conf path', shown(format('SELECT pg_read_file(%L)',
		current_setting('data_directory') || '/postgresql.auto.conf'));
	SELECT 'rl_status', shown('SELECT string_agg(s::text, '','') FROM rl_status() s');
	SHOW ALL;
	SELECT * FROM pg_settings WHERE name LIKE 'ratelimit.%';
};
{
	my ($out, $err) = sql('a', $monitor_reads, 'monitor');
	push @seen, $out, $err;
	my %r = map { split /\|/, $_, 2 } grep { /^[a-z_. ]+\|/ } split /\n/, $out;
	is($r{show}, '********', 'pg_monitor: SHOW shows the password masked');
	is($r{current_setting}, '********', 'pg_monitor: current_setting() masked');
	is($r{missing_ok}, '********', 'pg_monitor: current_setting(missing_ok) masked');
	is($r{pg_settings}, '0', 'pg_monitor: not in pg_settings');
	is($r{pg_show_all_settings}, '0', 'pg_monitor: not in pg_show_all_settings()');
	is($r{pg_file_settings}, '42501', 'pg_monitor: pg_file_settings refused');
	is($r{'auto.conf'}, '42501', 'pg_monitor: postgresql.auto.conf not readable');
	is($r{'auto.conf path'}, '42501',
		'pg_monitor: postgresql.auto.conf not readable by its full path');
	like($r{rl_status} // '', qr/^\(/, 'pg_monitor: rl_status() granted and shown');
	unlike($out . $err, qr/\Q$secret\E/,
		'pg_monitor: the password is in nothing the role was shown');
}

# 6d. In a fresh session, before any rl_ call: the password is already
# the superuser-only setting, since the postmaster loaded the library.
{
	my ($out) = sql('a', q{
		SELECT 'show', try('SHOW ratelimit.redis_password');
		SELECT 'value', try($$SELECT current_setting('ratelimit.redis_password', true)$$);
	}, 'plain');
	push @seen, $out;
	is($out, "show|42501\nvalue|42501",
		'a fresh session cannot read the password before any call');
	unlike($out, qr/\Q$secret\E/, 'no password shown');
}

# 6e. The superuser's view: rl_status() and CLIENT LIST show no password.
{
	my $su = $node->background_psql('a');
	my $st = $su->query_safe(
		"SELECT * FROM rl_allow('su', 'gcra', 5, '1 hour'); SELECT * FROM rl_status()");
	like($st, qr/^t\|4\|/, 'the superuser is served with the configured password');
	my $list = $redis->cmd('CLIENT', 'LIST');
	$su->quit;
	like($list, qr/name=pg:$A:\d+/, 'CLIENT LIST shows the named backends');
	unlike($st, qr/\Q$secret\E/, 'rl_status() does not show the password');
	unlike($list, qr/\Q$secret\E/, 'CLIENT LIST does not show the password');
}

# 6f. Without preloading, the extension refuses to work: an ERROR, never
# a policy answer (failure_mode is closed here, and open would be worse).
{
	$node->append_conf('postgresql.conf', "shared_preload_libraries = ''\n");
	$node->restart;
	my ($out, $err) = sql('a', q{
		SELECT 'call', allowed FROM rl_allow('nopreload', 'gcra', 5, '1 hour');
	}, 'plain');
	like($err, qr/ratelimit must be loaded via shared_preload_libraries/,
		'not preloaded: rl_allow raises an error');
	unlike($out, qr/^call\|/m, 'not preloaded: no answer, not even the policy\'s');
	local $ENV{PGOPTIONS} = '-c ratelimit.failure_mode=open';
	($out, $err) = sql('a', q{
		SELECT 'call', allowed FROM rl_allow('nopreload', 'gcra', 5, '1 hour');
	}, 'plain');
	delete $ENV{PGOPTIONS};
	unlike($out, qr/^call\|t/m,
		'not preloaded: connection options cannot turn the limiter open');
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'ratelimit'\n");
	$node->restart;
}

# 7. The password from a file.  redis_password still holds the old
# secret, which Redis no longer accepts: the file wins.  The files are
# the server OS user's (the tests run as it), mode 0600.
{
	my $dir = PostgreSQL::Test::Utils::tempdir;
	my ($s2, $s3, $bad) =
	  ('File-Secret-3319', 'File-Secret-Next-8842', 'File-Wrong-6650');
	my ($pw1, $pw2) = ("$dir/redis1.pw", "$dir/redis2.pw");
	my @leaks;

	my $write_pw = sub {
		my ($path, $text, $mode) = @_;
		open my $fh, '>', $path or die "$path: $!";
		print $fh $text;
		close $fh;
		chmod $mode, $path;
	};
	my $served = sub {
		my ($user) = @_;
		my ($out, $err) = sql('a',
			"SELECT allowed FROM rl_peek('plain', 'gcra', 5, '1 hour')", $user);
		push @leaks, $out, $err;
		return ($out, $err);
	};
	my $switch = sub {
		my ($path) = @_;
		$node->safe_psql('postgres', qq{
			SET log_statement = 'none';
			LOAD 'ratelimit';
			ALTER SYSTEM SET ratelimit.redis_password_file = '$path';
			SELECT pg_reload_conf();
		});
		sleep 1;
	};

	# A session connected with the old password, kept across the switch.
	my $su = $node->background_psql('a', on_error_stop => 0);
	like($su->query_safe("SELECT * FROM rl_allow('su7', 'gcra', 5, '1 hour')"),
		qr/^t\|4\|/, 'before the file: a running session is served');

	$write_pw->($pw1, "$s2\n", 0600);
	$redis->cmd('CONFIG', 'SET', 'requirepass', $s2);
	$redis->cmd('AUTH', $s2);
	$redis->set_auth('-a', $s2);
	$switch->($pw1);
	is(($served->('plain'))[0], 't',
		'password file: a new session authenticates with the file (it wins over redis_password)');
	like($su->query_safe("SELECT * FROM rl_allow('su7', 'gcra', 5, '1 hour')"),
		qr/^t\|3\|/,
		'password file: the running session reconnected with it after the reload');

	# A reload that changes the password by switching files.
	$write_pw->($pw2, "$s3\r\nsecond line ignored\n", 0600);
	$redis->cmd('CONFIG', 'SET', 'requirepass', $s3);
	$redis->cmd('AUTH', $s3);
	$redis->set_auth('-a', $s3);
	$switch->($pw2);
	like($su->query_safe("SELECT * FROM rl_allow('su7', 'gcra', 5, '1 hour')"),
		qr/^t\|2\|/, 'new file: the running session is served with the new password');
	is(($served->('plain'))[0], 't', 'new file: a new session is served');
	push @leaks, $redis->cmd('CLIENT', 'LIST');

	# The monitoring role cannot read the file, nor the password.
	my ($out, $err) = sql('a', qq{
		SELECT 'pw file', shown(format('SELECT pg_read_file(%L)', '$pw2'));
		SELECT 'pw file setting', current_setting('ratelimit.redis_password_file');
		$monitor_reads}, 'monitor');
	push @leaks, $out, $err;
	my %r = map { split /\|/, $_, 2 } grep { /^[a-z_. ]+\|/ } split /\n/, $out;
	is($r{'pw file'}, '42501', 'pg_monitor: the password file is not readable');
	is($r{'pw file setting'}, $pw2, 'pg_monitor: the path of the file is shown');
	is($r{show}, '********', 'pg_monitor: redis_password still masked');

	# Refused files, and a wrong password: the policy answers (closed), the
	# WARNING and last_error name the setting, never a secret.
	my @refusals = (
		[ 'group-readable', sub { chmod 0640, $pw2 }, sub { chmod 0600, $pw2 },
			qr/ratelimit\.redis_password_file "\Q$pw2\E" has group or world access \(mode 0640\)/ ],
		[ 'world-readable', sub { chmod 0604, $pw2 }, sub { chmod 0600, $pw2 },
			qr/has group or world access \(mode 0604\)/ ],
		[ 'missing', sub { rename $pw2, "$pw2.away" }, sub { rename "$pw2.away", $pw2 },
			qr/could not open ratelimit\.redis_password_file "\Q$pw2\E": No such file/ ],
		[ 'empty', sub { $write_pw->($pw2, "\n", 0600) }, sub { $write_pw->($pw2, "$s3\n", 0600) },
			qr/the first line of ratelimit\.redis_password_file "\Q$pw2\E" is empty/ ],
		[ 'wrong password', sub { $write_pw->($pw2, "$bad\n", 0600) },
			sub { $write_pw->($pw2, "$s3\n", 0600) }, qr/WRONGPASS/ ]);
	for my $case (@refusals)
	{
		my ($what, $break, $mend, $reason) = @$case;
		$break->();
		my ($o, $e) = sql('a', qq{
			\\set VERBOSITY verbose
			SELECT 'call', allowed FROM rl_peek('su7', 'gcra', 5, '1 hour');
			SELECT 'last_error', last_error FROM rl_status();});
		$mend->();
		push @leaks, $o, $e;
		like($o, qr/^call\|f$/m, "$what file: the failure policy answers (closed)");
		like($e, qr/WARNING:  F0000: ratelimit cannot use Redis server \S+: check ratelimit\.redis_password_file\b.*; calls are denied/,
			"$what file: a WARNING naming the setting and what is done with calls");
		like($o, qr/^last_error\|misconfigured \(ratelimit\.redis_password_file\b.*$reason/m,
			"$what file: last_error says it is a configuration error, and why");
	}
	is(($served->('plain'))[0], 't', 'file mended: served again');
	$su->quit;

	my $all = join("\n", map { $_ // '' } @leaks);
	unlike($all, qr/\Q$s2\E|\Q$s3\E|\Q$bad\E/,
		'no file password in any output, message or CLIENT LIST');

	# The server log: no file password at all.  The one line with the old
	# redis_password secret is PostgreSQL's own, logged when the reload of
	# section 6 set it; README says so and points to the file.
	my $log = slurp_file($node->logfile);
	unlike($log, qr/\Q$s2\E|\Q$s3\E|\Q$bad\E/, 'no file password in the server log');
	like($log, qr/parameter "ratelimit\.redis_password_file" changed to "\Q$pw2\E"/,
		'the log names only the path of the file on reload');
	my @secret_lines = grep { /\Q$secret\E/ } split /\n/, $log;
	is(scalar(grep { !/LOG:  parameter "ratelimit\.redis_password" changed to / } @secret_lines),
		0, 'redis_password appears in the log only in PostgreSQL\'s own reload line');

	$node->safe_psql('postgres', q{
		ALTER SYSTEM RESET ratelimit.redis_password_file;
		SELECT pg_reload_conf();
	});
}

$node->safe_psql('postgres', q{
	ALTER SYSTEM RESET ratelimit.redis_password;
	ALTER SYSTEM RESET ratelimit.failure_mode;
	SELECT pg_reload_conf();
});
$redis->cmd('CONFIG', 'SET', 'requirepass', '');

fact('count_checks.006', $checks);
fact('miscounted.006', $miscounted);
$node->stop;
done_testing();
