# test/t/033_stats_statement.pl
#
# The statement trigger's denials in the server-wide statistics, against a
# standalone Redis and against a real Redis Cluster of 3 masters
# (test/perl/RLCluster.pm), where a statement's keys are checked one
# script per hash slot (rl_trigger_slots.c).  In each mode, both forms of
# rl_throttle_statement (a transition table; a BEFORE row and AFTER
# statement pair) run statements over 8 keys in several slots:
#   - admitted, then refused on one key over its limit (three times),
#     on another key once, and in shadow mode once;
#   - in shadow mode, a key whose rows alone cost more than the capacity
#     ("too big": counted as a denial without being sent).
# rl_stats_limiters() must list exactly the denied limiters, each with its
# denials, and rl_stats() the same totals: calls, allowed, denied and
# shadow_denied, denied equal to the sum of the limiters' denials.
# 0.4.0 counted none of the cluster path's denials and no "too big" one
# in rl_stats_limiters (issue 27).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

use RLRedis qw(rl_node rl_session rl_run);
use RLCluster;

my $redis = RLRedis->new(name => 'r033');
my $rc = RLCluster->new(name => 'c33_', masters => 3, replicas => 0);
my $seeds = $rc->seeds;

# A pinned clock: the one-day windows cannot roll over mid-test.
my $node = rl_node('c033', $redis, "ratelimit.test_clock_ms = 1800000000000\n");
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

# Limit 5 a day per author; the two forms on two tables.
$node->safe_psql('postgres', q{
CREATE TABLE ta (author text);
CREATE TRIGGER ta_limit AFTER INSERT ON ta REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author', 'fixed_window', '5', '1 day');
CREATE TABLE tb (author text);
CREATE TRIGGER tb_count BEFORE INSERT ON tb
	FOR EACH ROW EXECUTE FUNCTION rl_throttle_statement('author', 'fixed_window', '5', '1 day');
CREATE TRIGGER tb_check AFTER INSERT ON tb
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author', 'fixed_window', '5', '1 day');
});

my @keys = map { sprintf('k%02d', $_) } 1 .. 8;

# The Redis key of a trigger's limiter on the author $value.
sub trigger_key
{
	my ($table, $value) = @_;
	return "rl:{$dboid:public.$table:author='$value'}:fixed_window:5:86400000ms";
}

my %masters = map {
	$rc->master_of_slot(RLCluster::slot_of(trigger_key('ta', $_)))->port => 1
} @keys;
my %slots = map { RLCluster::slot_of(trigger_key('tb', $_)) => 1 } @keys;
is(scalar keys %masters, 3, 'the 8 keys fall on all three masters');
is(scalar keys %slots, 8, 'the 8 keys fall in 8 hash slots');

# An INSERT of one row for each of the 8 keys, and $extra more for key $k.
sub insert_sql
{
	my ($table, $k, $extra) = @_;
	return "INSERT INTO $table SELECT 'k' || lpad(i::text, 2, '0') FROM generate_series(1, 8) i"
	  . " UNION ALL SELECT '$k' FROM generate_series(1, $extra)";
}

# One mode's run: the statements on both tables in one session, then
# what rl_stats_limiters and rl_stats say.
sub run_mode
{
	my ($mode, @set) = @_;
	my $s = rl_session($node);
	rl_run($s, $_) for @set;
	rl_run($s, 'SELECT rl_stats_reset()');
	for my $t (qw(ta tb))
	{
		my ($out, $err) = rl_run($s,
			"INSERT INTO $t SELECT 'k' || lpad(i::text, 2, '0') FROM generate_series(1, 8) i, generate_series(1, 3)"
		);
		unlike($err, qr/ERROR/, "$mode $t: 3 rows for each of 8 keys admitted");
		for my $try (1 .. 3)
		{
			($out, $err) = rl_run($s, insert_sql($t, 'k05', 2));
			like($err, qr/ERROR:\s+PT429.*\(author\)=\(k05\)/s,
				"$mode $t: k05 over its limit refuses the statement ($try)");
		}
		($out, $err) = rl_run($s, insert_sql($t, 'k02', 2));
		like($err, qr/ERROR:\s+PT429.*\(author\)=\(k02\)/s,
			"$mode $t: k02 over its limit refuses the statement");
		rl_run($s, 'SET ratelimit.enforce = off');
		($out, $err) = rl_run($s, insert_sql($t, 'k07', 2));
		unlike($err, qr/ERROR/, "$mode $t: shadow mode lets k07's refusal through");
		# 6 rows for k11 cost more than the capacity of 5: too big.
		($out, $err) = rl_run($s,
			"INSERT INTO $t SELECT 'k' || lpad(i::text, 2, '0') FROM generate_series(1, 4) i"
			  . " UNION ALL SELECT 'k11' FROM generate_series(1, 6)");
		unlike($err, qr/ERROR/, "$mode $t: shadow mode lets the too-big k11 through");
		rl_run($s, 'RESET ratelimit.enforce');
	}
	my ($lim) = rl_run($s,
		"SELECT string_agg(substring(key from 'public\\.(t[ab]:author=''k[0-9]+'')') || '=' || denied, ' ' ORDER BY key COLLATE \"C\")"
		  . " FROM rl_stats_limiters");
	is($lim // '',
		join(' ', map { my $t = $_; map { "$t:author='$_->[0]'=$_->[1]" } ([ 'k02', 1 ], [ 'k05', 3 ], [ 'k07', 1 ], [ 'k11', 1 ]) } qw(ta tb)),
		"$mode: rl_stats_limiters lists exactly the denied limiters with their denials");
	my ($keys_ok) = rl_run($s,
		'SELECT bool_and(key = ANY (ARRAY['
		  . join(',', map { my $t = $_; map { "'" . trigger_key($t, $_) =~ s/'/''/gr . "'" } qw(k02 k05 k07 k11) } qw(ta tb))
		  . "]) AND algorithm = 'fixed_window') FROM rl_stats_limiters");
	is($keys_ok, 't', "$mode: each entry is the refused limiter's own Redis key and algorithm");
	my ($st) = rl_run($s,
		'SELECT calls, allowed, denied, shadow_denied, denied = (SELECT sum(denied) FROM rl_stats_limiters), '
		  . 'failures, fail_open + fail_closed FROM rl_stats');
	# Per table: 8 statements (the too-big key is a call of its own), 2
	# admitted (the too-big statement's other keys), 6 denied, 2 of them
	# let through.
	is($st, '16|4|12|4|t|0|0',
		"$mode: rl_stats counts 16 calls, 4 admitted, 12 denied (4 in shadow mode), as many as the limiters");
	$s->quit;
}

run_mode('standalone');
run_mode('cluster', "SET ratelimit.redis_mode = 'cluster'",
	"SET ratelimit.redis_nodes = '$seeds'");

# The cluster's statements went one script per hash slot.
my $runs = 0;
$runs += $_->script_runs for $rc->masters;
cmp_ok($runs, '>', 16, "cluster: the statements ran as scripts per slot ($runs scripts)");

done_testing();
