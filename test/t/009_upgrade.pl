# test/t/009_upgrade.pl
#
# The upgrade path: a database that installed 0.1.0 and ran
# ALTER EXTENSION ratelimit UPDATE has the same catalog as one that
# installed the current version fresh.  Two dumps are compared:
#   - pg_dump --schema-only, which shows the extension and any privilege
#     that differs from the one its script set (pg_init_privs);
#   - pg_dump --schema-only --binary-upgrade, which also writes out every
#     member of the extension (types, functions, their privileges); the
#     lines that pin object OIDs for pg_upgrade are left out, since two
#     databases never share them.
# The updated database must also work: a call goes through, and the
# privileges 0.2.0 revoked from PUBLIC are revoked there too.  Grants an
# administrator made before the update survive it, also on the functions
# 0.3.0 recreates with a burst argument (rl_allow, rl_peek, rl_allow_many,
# rl_postgrest_guard), and on rl_reset, which 0.4.0 recreates with the
# parameters that name a limiter: each database grants the same before
# the dumps.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use RLRedis qw(rl_node);

my $redis = RLRedis->new(name => 'r009');
my $node = rl_node('c009', $redis);

my $current = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'ratelimit'");
my @versions = split /\n/, $node->safe_psql('postgres',
	"SELECT version FROM pg_available_extension_versions
	 WHERE name = 'ratelimit' ORDER BY string_to_array(version, '.')::int[]");
ok(scalar(@versions) >= 2, "versions installed: @versions (default $current)");

# An application role granted rl_allow, rl_peek (with grant option) and
# the batch form with costs.
$node->safe_psql('postgres', 'CREATE ROLE regress_rl_009_app');
my %grants = (
	old => q{
		GRANT EXECUTE ON FUNCTION rl_allow(text, text, bigint, interval, bigint),
			rl_allow_many(text[], text, bigint, interval, bigint[])
			TO regress_rl_009_app;
		GRANT EXECUTE ON FUNCTION rl_peek(text, text, bigint, interval)
			TO regress_rl_009_app WITH GRANT OPTION;},
	'0.5.0' => q{
		GRANT EXECUTE ON FUNCTION rl_allow(text, text, bigint, interval, bigint, bigint),
			rl_allow_many(text[], text, bigint, interval, bigint[], bigint)
			TO regress_rl_009_app;
		GRANT EXECUTE ON FUNCTION rl_peek(text, text, bigint, interval, bigint)
			TO regress_rl_009_app WITH GRANT OPTION;},
	'0.4.0' => q{
		GRANT EXECUTE ON FUNCTION rl_allow(text, text, bigint, interval, bigint, bigint),
			rl_allow_many(text[], text, bigint, interval, bigint[], bigint)
			TO regress_rl_009_app;
		GRANT EXECUTE ON FUNCTION rl_peek(text, text, bigint, interval, bigint)
			TO regress_rl_009_app WITH GRANT OPTION;},
	'0.3.0' => q{
		GRANT EXECUTE ON FUNCTION rl_allow(text, text, bigint, interval, bigint, bigint),
			rl_allow_many(text[], text, bigint, interval, bigint[], bigint)
			TO regress_rl_009_app;
		GRANT EXECUTE ON FUNCTION rl_peek(text, text, bigint, interval, bigint)
			TO regress_rl_009_app WITH GRANT OPTION;},
	reset_old => q{GRANT EXECUTE ON FUNCTION rl_reset(text, text) TO regress_rl_009_app;},
	reset_new => q{GRANT EXECUTE ON FUNCTION rl_reset(text, text, bigint, interval, bigint)
			TO regress_rl_009_app;},
	# 0.5.0's calls by policy name, granted after the update as on a fresh
	# install, with a policy to call.
	policy => q{
		GRANT EXECUTE ON FUNCTION rl_allow(text, text, bigint), rl_peek(text, text)
			TO regress_rl_009_app;
		INSERT INTO rl_policies (name, algo, "limit", "window")
			VALUES ('upgrade.009', 'gcra', 5, '1 minute');},
	new => q{
		GRANT EXECUTE ON FUNCTION rl_allow(text, text, bigint, interval, bigint, bigint),
			rl_allow_many(text[], text, bigint, interval, bigint[], bigint)
			TO regress_rl_009_app;
		GRANT EXECUTE ON FUNCTION rl_peek(text, text, bigint, interval, bigint)
			TO regress_rl_009_app WITH GRANT OPTION;});

$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh', 'CREATE EXTENSION ratelimit');
$node->safe_psql('fresh', $grants{new});
$node->safe_psql('fresh', $grants{reset_new});
$node->safe_psql('fresh', $grants{policy});
like($node->safe_psql_dump('fresh'),
	qr/GRANT ALL ON FUNCTION public\.rl_allow\(key text, algo text, "limit" bigint, "window" interval, cost bigint, burst bigint\) TO regress_rl_009_app;/,
	'the schema dump shows the grant on rl_allow, so the comparison sees it');

# Every older version is installed and updated along the path PostgreSQL
# finds, step by step through the upgrade scripts.
for my $old (grep { $_ ne $current } @versions)
{
	my $db = "from_$old";
	$db =~ s/\./_/g;
	$node->safe_psql('postgres', qq{CREATE DATABASE "$db"});
	$node->safe_psql($db, "CREATE EXTENSION ratelimit VERSION '$old'");
	$node->safe_psql($db, $grants{$old} // $grants{old});
	$node->safe_psql($db, $old eq '0.4.0' || $old eq '0.5.0' ? $grants{reset_new} : $grants{reset_old});
	$node->safe_psql($db, 'ALTER EXTENSION ratelimit UPDATE');
	$node->safe_psql($db, $grants{policy});
	is($node->safe_psql($db,
			"SELECT extversion FROM pg_extension WHERE extname = 'ratelimit'"),
		$current, "$old updated to $current");

	for my $mode ([], ['--binary-upgrade'])
	{
		my $what = @$mode ? 'binary-upgrade dump' : 'schema dump';
		my @dumps;
		for my $d ('fresh', $db)
		{
			my $dump = $node->safe_psql_dump($d, @$mode);
			push @dumps, $dump;
		}
		ok(length($dumps[0]) > 0, "$what of the fresh install is not empty");
		is($dumps[1], $dumps[0], "$what: $old + UPDATE equals a fresh $current");
	}

	# Spot checks that the comparison can see what matters.
	is($node->safe_psql($db,
			"SELECT has_function_privilege('public',
				'rl_allow(text, text, bigint, interval, bigint, bigint)', 'EXECUTE')"),
		'f', "$old + UPDATE: rl_allow is not executable by PUBLIC");
	is($node->safe_psql($db,
			"SELECT string_agg(p.oid::regprocedure || ' '
				|| has_function_privilege('public', p.oid, 'EXECUTE'), ', '
				ORDER BY p.oid::regprocedure::text)
			 FROM pg_proc p JOIN pg_depend d ON d.objid = p.oid
				AND d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
			 JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'ratelimit'
			 WHERE has_function_privilege('public', p.oid, 'EXECUTE')"),
		'', "$old + UPDATE: no function of the extension is executable by PUBLIC");
	is($node->safe_psql($db,
			"SELECT has_function_privilege('regress_rl_009_app',
				'rl_allow(text, text, bigint, interval, bigint, bigint)', 'EXECUTE'),
				has_function_privilege('regress_rl_009_app',
				'rl_peek(text, text, bigint, interval, bigint)', 'EXECUTE WITH GRANT OPTION'),
				has_function_privilege('regress_rl_009_app',
				'rl_allow_many(text[], text, bigint, interval, bigint[], bigint)', 'EXECUTE'),
				has_function_privilege('regress_rl_009_app',
				'rl_allow_many(text[], text, bigint, interval, bigint, bigint)', 'EXECUTE')"),
		't|t|t|f', "$old + UPDATE: the grants on rl_allow, rl_peek and rl_allow_many survive, no more");
	is($node->safe_psql($db,
			"SELECT has_function_privilege('regress_rl_009_app',
				'rl_allow(text, text, bigint)', 'EXECUTE'),
				has_function_privilege('public', 'rl_allow(text, text, bigint)', 'EXECUTE'),
				has_table_privilege('public', 'rl_policies', 'SELECT'),
				has_table_privilege('regress_rl_009_app', 'rl_policies', 'INSERT')"),
		't|f|t|f', "$old + UPDATE: rl_allow by name as granted, rl_policies readable by all, written by none");
	is($node->safe_psql($db,
			"SET ROLE regress_rl_009_app;
			 SELECT allowed, remaining FROM rl_allow('upgrade-009-app', 'upgrade.009')"),
		't|4', "$old + UPDATE: the application role calls rl_allow by policy name");
	is($node->safe_psql($db,
			"SELECT has_function_privilege('regress_rl_009_app',
				'rl_reset(text, text, bigint, interval, bigint)', 'EXECUTE')"),
		't', "$old + UPDATE: the grant on rl_reset survives on the new rl_reset");
	is($node->safe_psql($db,
			"SELECT count(*) FROM pg_proc WHERE proname LIKE '%before_burst'
				OR proname LIKE '%before_parameters'"),
		'0', "$old + UPDATE: the functions replaced are gone");
	is($node->safe_psql($db,
			"SET ROLE regress_rl_009_app;
			 SELECT allowed FROM rl_allow('upgrade-009-app', 'token_bucket', 1, '1 minute', burst => 3)"),
		't', "$old + UPDATE: the application role calls rl_allow with a burst");
	is($node->safe_psql($db,
			"SELECT allowed FROM rl_allow('upgrade-009', 'gcra', 5, '1 minute')"),
		't', "$old + UPDATE: a call goes through");
}

# A 0.5.0 catalog served by the new library, then updated: its rl_stats
# (no refunds columns) and its rl_policies (no refund_on_abort) work
# before the update; after it, a policy made before keeps refunds off, and
# the grants an administrator made on rl_stats (function, view and the
# view's columns, which the update recreates) survive.
$node->safe_psql('postgres', 'CREATE ROLE regress_rl_009_mon');
$node->safe_psql('postgres', 'CREATE ROLE regress_rl_009_col');
$node->safe_psql('postgres', 'CREATE DATABASE old050');
$node->safe_psql('old050', q{CREATE EXTENSION ratelimit VERSION '0.5.0';
GRANT EXECUTE ON FUNCTION rl_stats() TO regress_rl_009_mon, regress_rl_009_col;
GRANT SELECT ON rl_stats TO regress_rl_009_mon;
GRANT SELECT (calls, denied) ON rl_stats TO regress_rl_009_col;
GRANT SELECT (failures) ON rl_stats TO regress_rl_009_col WITH GRANT OPTION;
INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('old.050', 'fixed_window', 5, '1 hour');});
is($node->safe_psql('old050', "SELECT calls >= 0 FROM rl_stats;
	BEGIN; SELECT remaining FROM rl_allow('k009', 'old.050'); ROLLBACK;
	SELECT remaining FROM rl_peek('k009', 'old.050')"),
	"t\n4\n4", '0.5.0 catalog on the new library: rl_stats and a policy work, and the policy does not refund');
$node->safe_psql('old050', 'ALTER EXTENSION ratelimit UPDATE');
is($node->safe_psql('old050', "SELECT refund_on_abort FROM rl_policies WHERE name = 'old.050'"),
	'f', '0.5.0 + UPDATE: a policy made before keeps refunds off');
is($node->safe_psql('old050', "SET ROLE regress_rl_009_mon; SELECT refunds, refunds_lost FROM rl_stats"),
	'0|0', '0.5.0 + UPDATE: the monitoring role granted rl_stats reads its new columns');
is($node->safe_psql('old050',
		"SELECT has_function_privilege('regress_rl_009_mon', 'rl_stats()', 'EXECUTE'),
			has_table_privilege('regress_rl_009_mon', 'rl_stats', 'SELECT'),
			has_function_privilege('public', 'rl_stats()', 'EXECUTE'),
			has_table_privilege('pg_monitor', 'rl_stats', 'SELECT')"),
	't|t|f|t', '0.5.0 + UPDATE: the grants on rl_stats survive, PUBLIC still may not, pg_monitor may');
like($node->safe_psql_dump('old050'),
	qr/GRANT SELECT ON TABLE public\.rl_stats TO regress_rl_009_mon;/,
	'0.5.0 + UPDATE: pg_dump still writes the administrator\'s grant on the view');
# A grant on some of the view's columns survives as it was: those columns
# (the grant option too), not the view, not the new columns.
is($node->safe_psql('old050',
		"SELECT has_column_privilege('regress_rl_009_col', 'rl_stats', 'denied', 'SELECT'),
			has_column_privilege('regress_rl_009_col', 'rl_stats', 'failures', 'SELECT WITH GRANT OPTION'),
			has_column_privilege('regress_rl_009_col', 'rl_stats', 'calls', 'SELECT WITH GRANT OPTION'),
			has_column_privilege('regress_rl_009_col', 'rl_stats', 'refunds', 'SELECT'),
			has_table_privilege('regress_rl_009_col', 'rl_stats', 'SELECT')"),
	't|t|f|f|f', '0.5.0 + UPDATE: the grants on columns of rl_stats survive, no more');
is($node->safe_psql('old050', "SET ROLE regress_rl_009_col; SELECT calls >= denied FROM rl_stats"),
	't', '0.5.0 + UPDATE: the role granted two columns reads them');
my $dump050 = $node->safe_psql_dump('old050');
like($dump050, qr/GRANT SELECT\(denied\) ON TABLE public\.rl_stats TO regress_rl_009_col;/,
	'0.5.0 + UPDATE: pg_dump still writes the administrator\'s grant on a column');
is($node->safe_psql('old050',
		"SELECT count(*) FROM pg_init_privs
		 WHERE objoid = 'rl_stats'::regclass AND classoid = 'pg_class'::regclass AND objsubid > 0"),
	'0', '0.5.0 + UPDATE: no initial privileges on the view\'s columns, as on a fresh install');
$node->safe_psql('postgres', 'DROP DATABASE old050');
$node->safe_psql('postgres', 'DROP ROLE regress_rl_009_mon');
$node->safe_psql('postgres', 'DROP ROLE regress_rl_009_col');

# A 0.3.0 catalog served by the new library: its rl_reset(key, algo) no
# longer names one limiter, and says so (and what to run), touching
# nothing; the update's rl_reset takes the parameters.
$node->safe_psql('postgres', 'CREATE DATABASE old030');
$node->safe_psql('old030', "CREATE EXTENSION ratelimit VERSION '0.3.0'");
my ($rc, $o030, $e030) = $node->psql('old030', "SELECT rl_reset('k009', 'gcra')");
like($e030, qr/rl_reset\(key, algo\) needs the limiter's limit and window since ratelimit 0\.4\.0.*HINT:  Run ALTER EXTENSION ratelimit UPDATE/s,
	'0.3.0\'s rl_reset(key, algo) on the new library: an ERROR that says to update');
$node->safe_psql('old030', 'ALTER EXTENSION ratelimit UPDATE');
is($node->safe_psql('old030', "SELECT rl_allow('k009', 'gcra', 1, '1 hour') IS NOT NULL, "
	  . "rl_reset('k009', 'gcra', 1, '1 hour'), (rl_allow('k009', 'gcra', 1, '1 hour')).allowed"),
	't|t|t', 'updated: rl_reset(key, algo, limit, window) forgets that limiter');
$node->safe_psql('postgres', 'DROP DATABASE old030');

# rl_status gained OUT columns in 0.3.0 (cluster counters), so the update
# drops and creates it again: a grant an administrator made on it survives,
# and pg_dump still writes it out (it stays the administrator's, not the
# extension's initial privilege).  The new library serves the old,
# shorter definition too.
$node->safe_psql('postgres', 'CREATE ROLE regress_rl_monitor');
$node->safe_psql('postgres', 'CREATE DATABASE grants');
$node->safe_psql('grants', q{CREATE EXTENSION ratelimit VERSION '0.2.0';
GRANT EXECUTE ON FUNCTION rl_status() TO regress_rl_monitor});
is($node->safe_psql('grants', 'SELECT count(*) FROM rl_status() s, row_to_json(s) j, json_object_keys(j)'),
	'14', '0.2.0\'s rl_status (14 columns) is served by the new library');
$node->safe_psql('grants', 'ALTER EXTENSION ratelimit UPDATE');
is($node->safe_psql('grants',
		"SELECT has_function_privilege('regress_rl_monitor', 'rl_status()', 'EXECUTE'), "
		  . "has_function_privilege('public', 'rl_status()', 'EXECUTE')"),
	't|f', 'update: the grant on rl_status survives, PUBLIC still may not');
is($node->safe_psql('grants',
		"SET ROLE regress_rl_monitor; SELECT redirects, map_refreshes FROM rl_status()"),
	'0|0', 'update: the monitoring role reads the new counters');
like($node->safe_psql_dump('grants'),
	qr/GRANT ALL ON FUNCTION public\.rl_status\(.*\) TO regress_rl_monitor;/,
	'update: pg_dump still writes the administrator\'s grant');
$node->safe_psql('postgres', 'DROP DATABASE grants');
$node->safe_psql('postgres', 'DROP ROLE regress_rl_monitor');

# An update runs as the superuser who runs it, with search_path set to the
# extension's schema and pg_temp; pg_catalog, left out, is searched first,
# so a function of the same signature in the schema never wins, but one
# that matches a call better does.  A role that may create objects in
# public (PUBLIC may, on a cluster upgraded from PostgreSQL 14) plants
# such ones for the calls the update scripts make: quote_ident(name) for
# quote_ident(pg_get_userbyid(...)), format(text, regprocedure, text,
# text) for the GRANT they build, =(oid, integer) for "grantee = 0" and
# =(oid, regclass) for "classoid = 'pg_proc'::regclass"; and, for
# completeness, pg_get_userbyid(oid) and aclexplode(aclitem[]), which
# lose to pg_catalog's.  Each would note itself in a table and make the
# role a superuser.  The updates from 0.2.0 name every function, operator
# and catalog with its schema: none of them runs, and the grants are
# copied all the same.
$node->safe_psql('postgres', 'CREATE ROLE regress_rl_009_planter LOGIN');
$node->safe_psql('postgres', 'CREATE DATABASE planted');
$node->safe_psql('planted', "CREATE EXTENSION ratelimit VERSION '0.2.0'");
$node->safe_psql('planted', $grants{old});
$node->safe_psql('planted', $grants{reset_old});
$node->safe_psql('planted', 'GRANT CREATE ON SCHEMA public TO regress_rl_009_planter');
$node->safe_psql('planted', q{
SET ROLE regress_rl_009_planter;
CREATE TABLE planted_ran (what text, by_user name);
CREATE FUNCTION planted_note(what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO public.planted_ran VALUES (what, current_user);
	IF (SELECT rolsuper FROM pg_catalog.pg_roles
		WHERE rolname OPERATOR(pg_catalog.=) current_user) THEN
		ALTER ROLE regress_rl_009_planter SUPERUSER;
	END IF;
END $$;
CREATE FUNCTION quote_ident(name) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM public.planted_note('quote_ident(name)');
	RETURN pg_catalog.quote_ident($1::text);
END $$;
CREATE FUNCTION format(text, regprocedure, text, text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
	PERFORM public.planted_note('format(text, regprocedure, text, text)');
	RETURN pg_catalog.format($1, $2, $3, $4);
END $$;
CREATE FUNCTION pg_get_userbyid(oid) RETURNS name LANGUAGE plpgsql AS $$
BEGIN
	PERFORM public.planted_note('pg_get_userbyid(oid)');
	RETURN pg_catalog.pg_get_userbyid($1);
END $$;
CREATE FUNCTION aclexplode(aclitem[], OUT grantor oid, OUT grantee oid,
	OUT privilege_type text, OUT is_grantable boolean)
RETURNS SETOF record LANGUAGE plpgsql AS $$
BEGIN
	PERFORM public.planted_note('aclexplode(aclitem[])');
	RETURN QUERY SELECT * FROM pg_catalog.aclexplode($1);
END $$;
CREATE FUNCTION planted_oid_int(oid, integer) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	PERFORM public.planted_note('=(oid, integer)');
	RETURN $1 OPERATOR(pg_catalog.=) $2::oid;
END $$;
CREATE OPERATOR = (LEFTARG = oid, RIGHTARG = integer, FUNCTION = planted_oid_int);
CREATE FUNCTION planted_oid_class(oid, regclass) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
	PERFORM public.planted_note('=(oid, regclass)');
	RETURN $1 OPERATOR(pg_catalog.=) $2::oid;
END $$;
CREATE OPERATOR = (LEFTARG = oid, RIGHTARG = regclass, FUNCTION = planted_oid_class);
});
# The plants work: called by the planter they note themselves (and stay
# harmless, since the planter is no superuser).
is($node->safe_psql('planted', q{
SET ROLE regress_rl_009_planter;
SELECT quote_ident('x'::name), 1::oid = 1, 'pg_class'::regclass::oid = 'pg_class'::regclass;
SELECT count(*) FROM planted_ran;
TRUNCATE planted_ran;}),
	"x|t|t\n3", 'planted: the planter\'s functions and operators are chosen where they match better');
$node->safe_psql('planted', 'ALTER EXTENSION ratelimit UPDATE');
is($node->safe_psql('planted',
		"SELECT extversion FROM pg_extension WHERE extname = 'ratelimit'"),
	$current, "planted: 0.2.0 updated to $current");
is($node->safe_psql('planted',
		"SELECT coalesce(string_agg(DISTINCT what || ' as ' || by_user, ', '), 'none') FROM planted_ran"),
	'none', 'planted: no planted function or operator ran during the update');
is($node->safe_psql('planted',
		"SELECT rolsuper FROM pg_roles WHERE rolname = 'regress_rl_009_planter'"),
	'f', 'planted: the planter is not a superuser');
is($node->safe_psql('planted',
		"SELECT has_function_privilege('regress_rl_009_app',
			'rl_allow(text, text, bigint, interval, bigint, bigint)', 'EXECUTE'),
			has_function_privilege('regress_rl_009_app',
			'rl_reset(text, text, bigint, interval, bigint)', 'EXECUTE')"),
	't|t', 'planted: the update copied the grants all the same');
$node->safe_psql('postgres', 'DROP DATABASE planted');
$node->safe_psql('postgres', 'DROP ROLE regress_rl_009_planter');

done_testing();

# pg_dump of one database as text, without the lines that differ between
# any two databases: comments, the dump's random \\restrict key, OID and
# LSN pins.
package PostgreSQL::Test::Cluster;

sub safe_psql_dump
{
	my ($self, $db, @args) = @_;
	my $out = '';
	my $err = '';
	IPC::Run::run([ 'pg_dump', '--schema-only', '--no-owner', @args,
		'-h', $self->host, '-p', $self->port, '-d', $db ],
		'>', \$out, '2>', \$err)
	  or die "pg_dump $db failed: $err";
	my @keep;
	for my $line (split /\n/, $out)
	{
		next if $line =~ /^--/;
		next if $line =~ /^\\(un)?restrict /;
		# OIDs and LSNs that pg_upgrade would carry over.
		next if $line =~ /binary_upgrade_set_next_/;
		# The configuration table's OID, its (and its TOAST table's) frozen
		# transaction IDs.
		$line =~ s/(binary_upgrade_create_empty_extension\(.*?, ')\{[0-9,]*\}'/$1\{oids\}'/;
		$line =~ s/^SET relfrozenxid = '\d+', relminmxid = '\d+'$/SET relfrozenxid = xid, relminmxid = mxid/;
		$line =~ s/^WHERE oid = '\d+';$/WHERE oid = oid;/;
		next if $line =~ /pg_catalog\.set_config\('search_path'/;
		next if $line =~ /^\s*$/;
		push @keep, $line;
	}
	return join("\n", @keep) . "\n";
}
