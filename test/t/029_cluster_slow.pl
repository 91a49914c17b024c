# test/t/029_cluster_slow.pl
#
# A batch over a Redis Cluster whose masters sit behind slow links takes
# about the slowest master's time, not the sum of the masters' times: the
# one wait on every master's socket (rl_nodes_receive in src/redis/rl_roundtrip.c)
# writes each master's pipeline as its socket takes more and reads each
# as its replies come, so the links work at once.
#
# The suite runs in network namespaces of its own, without root
# (RLNetns->leaves): each of the three masters in a namespace of its own,
# joined to the suite's (PostgreSQL's) by a veth pair that a token bucket
# narrows to 800 kbit/s (this kernel has no netem: a slow link here is a
# narrow one).  Send buffers are small in the suite's namespace (tcp_wmem,
# 16 kB at most) and so are the links' segments (gso_max_size), so a
# master's pipeline of 83 keys of 900 bytes, about 110 kB and some 1.1 s on
# its link, goes out only as fast as the link drains it and the backend
# writes it.
#
# A batch of 83 keys on one master measures that master's time T; with
# command_timeout at 1.4 T, a batch of 250 keys over the three masters
# (one round trip) must be all Redis's answers.  Waiting node by node, the
# second and third masters' pipelines would go out only as the masters
# before them answered, and their keys would miss the deadline: with
# rl_nodes_receive made to wait node by node (its fallback loop) this test
# fails (measured: T 1.11 s, the batch cut off at the 1.55 s timeout, the
# policy's answers for the later masters' keys); with the one wait the
# batch took 1.15 s for T 1.19 s.  Timings are recorded, not asserted; what
# is asserted is whose answers the rows are.

BEGIN
{
	require RLNetns;
	RLNetns::enter_or_skip();
}

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

use RLRedis qw(rl_node rl_session rl_run fact fault_mark fault_done);
use RLCluster;

my $net = RLNetns->leaves(3);

# Small send buffers for every socket opened from here on in this
# namespace (tcp_wmem is per network namespace).
open my $wm, '>', '/proc/sys/net/ipv4/tcp_wmem' or die "tcp_wmem: $!";
print $wm "4096 8192 16384\n";
close $wm;

my $rc = RLCluster->new(
	name => 'c29_',
	replicas => 0,
	unixsocket => 1,
	place => { map { ($_ - 1) => { bind => $net->leaf_addr($_), wrap => [ $net->in_leaf($_) ] } } 1 .. 3 });
my @nodes = $rc->nodes;
my ($slow1, $slow2, $slow3) = @nodes;
is(join(' ', map { $_->host } @nodes), join(' ', map { $net->leaf_addr($_) } 1 .. 3),
	'three masters, each behind a link of its own');
my $seeds = $rc->seeds;
my $node = rl_node('c029', $slow1, qq{
ratelimit.redis_mode = 'cluster'
ratelimit.redis_nodes = '$seeds'
ratelimit.deny_cache = off
});
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

# Redis's key slot, continued from a state: the keys share a 900-byte
# head, so each key costs only its short tail.
my $crc = \&RLCluster::crc16;
my $pad = 'x' x 900;
my $head = $crc->(0, "$dboid:$pad");
is($crc->($head, ':c29:1') & 16383,
	$rc->keyslot("rl:{$dboid:$pad:c29:1}:fixed_window:10:86400000ms"),
	'the test computes key slots as Redis does');
my @ranges = $rc->slot_ranges;
my $port_of_slot = sub {
	for my $r (@ranges)
	{
		return $r->[2] if $_[0] >= $r->[0] && $_[0] <= $r->[1];
	}
	return undef;
};

# Key numbers on each master: $want{port} of them, from number $from on.
sub ids_on
{
	my ($from, %want) = @_;
	my %ids;
	for (my $i = $from; grep({ @{ $ids{$_} // [] } < $want{$_} } keys %want); $i++)
	{
		my $p = $port_of_slot->($crc->($head, ":c29:$i") & 16383);
		push @{ $ids{$p} }, $i if exists $want{$p} && @{ $ids{$p} // [] } < $want{$p};
	}
	return %ids;
}

# One rl_allow_many over the keys numbered @ids, in that order: "the rows
# Redis answered|all rows", and the seconds it took.
my $s = rl_session($node);
sub batch
{
	my @ids = @_;
	my $arr = "(SELECT array_agg(repeat('x', 900) || ':c29:' || i ORDER BY o) FROM unnest(ARRAY["
	  . join(',', @ids) . "]) WITH ORDINALITY u(i, o))";
	my ($out, $err, $took) = rl_run($s,
		"SELECT count(remaining) || '|' || count(*) FROM rl_allow_many($arr, 'fixed_window', 10, '1 day')");
	diag($err) if $err ne '';
	return ($out, $took);
}

# Warm links to every master, before the links are slowed.
my %warm = ids_on(1_000_000, map { ($_->port => 2) } @nodes);
my ($wout) = batch(map { @$_ } values %warm);
is($wout, '6|6', 'warm: every master answers');
$net->shape($_, '800kbit') for 1 .. 3;

my %ids = ids_on(1, $slow1->port => 249, $slow2->port => 83, $slow3->port => 84);
my @s1 = @{ $ids{ $slow1->port } };
my @all = (@s1[ 166 .. 248 ], @{ $ids{ $slow2->port } }, @{ $ids{ $slow3->port } });

# A slow master's time, measured here with a long timeout (this machine's
# speed, the token bucket's start): the second of two batches of 83 keys.
my $mark = fault_mark();
rl_run($s, 'SET ratelimit.command_timeout = 10000');
my ($o0, $t0) = batch(@s1[ 0 .. 82 ]);
my ($o1, $t1) = batch(@s1[ 83 .. 165 ]);
is("$o0 $o1", '83|83 83|83', 'one slow master: its 83 keys are Redis\'s, twice');

# The timeout between one slow master's time and the sum: the batch over
# the three is all Redis's only if their links carried the pipelines at
# once.
my $timeout = int(1.4 * $t1 * 1000);
rl_run($s, "SET ratelimit.command_timeout = $timeout");
my ($o2, $t2) = batch(@all);
is($o2, '250|250',
	"three slow masters within $timeout ms: all 250 rows are Redis's (waiting node by node, the last masters miss the deadline)");
my ($st) = rl_run($s, 'SELECT failures FROM rl_status()');
is($st, '0', 'no failure recorded');
note sprintf('one slow master: %.2f s (first batch %.2f s); three slow masters: %.2f s; timeout %d ms',
	$t1, $t0, $t2, $timeout);
fact('cluster_slow_one_master_s.029', sprintf('%.2f', $t1));
fact('cluster_slow_three_masters_s.029', sprintf('%.2f', $t2));
fault_done('cluster batch over three slowed links at once', $mark);

$s->quit;
done_testing();
