# test/t/030_cluster_bounds.pl
#
# Redis Cluster at the edges of what one backend holds, against a real
# local cluster of 5 masters without replicas (test/perl/RLCluster.pm):
#   1. failure_mode = local with the cluster down: a statement over keys
#      in many hash slots (check round '?', then consume round '=') is
#      answered by the local engine exactly as the cluster answered the
#      same statements (0.4.0: ERROR unknown rate limiting algorithm "?");
#   2. a slot-map fetch with every master stalled (SIGSTOP) asks the
#      nodes only within the call's one deadline (command_timeout 400
#      ms): the call takes about that long and the policy answers, where
#      0.4.0 asked each stalled master for a full command_timeout (1.6 s
#      with five masters);
#   3. a backend with no external descriptor left, then one: the one
#      wait on every master's socket needs an epoll set of its own; with
#      none left the call waits on one master at a time, with one left the
#      set takes it and gives it back (0.4.0 reserved one and then had
#      CreateWaitEventSet reserve another: ERROR epoll_create1 failed, and
#      the first reservation was never given back);
#   4. a master announcing 69 addresses in turn (cluster-announce-ip
#      127.0.0.2 .. 127.0.0.70, where nothing listens) over one session's
#      life: more distinct addresses than the 64 cluster nodes a backend
#      holds, so a map fetch must let go of the nodes it no longer names;
#      once the master announces an address it listens on (127.0.0.200),
#      the session's calls are Redis's again (0.4.0: the registry stayed
#      full, every map fetch failed and the master's keys got the policy's
#      answer for the rest of the session).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

use RLRedis qw(rl_node rl_session rl_run fact fault_mark fault_done);
use RLCluster;

my $rc = RLCluster->new(name => 'c30_', masters => 5, replicas => 0);
my @masters = $rc->masters;
is(scalar @masters, 5, 'five masters serve the slots');
my $seeds = $rc->seeds;
my $node = rl_node('c030', $masters[0], qq{
ratelimit.redis_mode = 'cluster'
ratelimit.redis_nodes = '$seeds'
ratelimit.deny_cache = off
max_files_per_process = 100
});
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

# A key "$prefix<n>" of rl_allow(key, 'fixed_window', $limit, '1 day')
# whose slot master $m serves.
sub key_on
{
	my ($m, $prefix, $limit) = @_;
	for my $i (1 .. 100_000)
	{
		my $s = RLCluster::slot_of("rl:{$dboid:$prefix$i}:fixed_window:$limit:86400000ms");
		return "$prefix$i" if $rc->master_of_slot($s)->port == $m->port;
	}
	die 'no key found on ' . $m->port;
}

# One call: (allowed|remaining, stderr, seconds).
sub allow
{
	my ($s, $key, $limit) = @_;
	return rl_run($s,
		"SELECT allowed, remaining FROM rl_allow('$key', 'fixed_window', $limit, '1 day')");
}

# Statements of a statement trigger (limit 10 per author, fixed window)
# over 30 authors in many slots, in a session with the clock pinned: what
# each answered, its rows so far and its ERROR and DETAIL lines, the
# table's name taken out.
my @statements = (
	# 3 rows for each author: admitted
	"INSERT INTO %t SELECT 'a' || k FROM generate_series(1, 30) k, generate_series(1, 3)",
	# one more each and 7 for a7, 11 in all: refused in the check round
	"INSERT INTO %t SELECT 'a' || k FROM generate_series(1, 30) k UNION ALL SELECT 'a7' FROM generate_series(1, 7)",
	# 7 more each (6 for a2): admitted only if nothing was charged above
	"INSERT INTO %t SELECT 'a' || k FROM generate_series(1, 30) k, generate_series(1, 7) g WHERE k <> 2 OR g < 7",
	# a1 is full, a2 has one left: refused, naming a1
	"INSERT INTO %t VALUES ('a1'), ('a2')",
	# a2's last one: admitted only if the refusal above charged nothing
	"INSERT INTO %t VALUES ('a2'), ('a2')",
	"INSERT INTO %t VALUES ('a2')",
	# shadow mode: refused, let through, nothing consumed
	"SET ratelimit.enforce = off; INSERT INTO %t VALUES ('a3'), ('a4'); RESET ratelimit.enforce",
	"INSERT INTO %t VALUES ('a5')");

sub statements
{
	my ($s, $table) = @_;
	my @got;
	$node->safe_psql('postgres', qq{
CREATE TABLE $table (author text);
CREATE TRIGGER lim AFTER INSERT ON $table REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author', 'fixed_window', '10', '1 day');
});
	rl_run($s, 'SET ratelimit.test_clock_ms = 1800000000000');
	for my $sql (@statements)
	{
		(my $q = $sql) =~ s/%t/$table/g;
		my (undef, $err) = rl_run($s, $q);
		my ($n) = rl_run($s, "SELECT count(*) FROM $table");
		# The ERROR and its DETAIL, not the WARNINGs of an outage.
		my ($level, @lines) = ('');
		for (split /\n/, $err)
		{
			$level = $1 if /\b(ERROR|WARNING|NOTICE|LOG):  /;
			push @lines, $1 if $level eq 'ERROR' && /\b((?:ERROR|DETAIL):  .*)/;
		}
		s/\Q$table\E/%t/g for @lines;
		push @got, join("\n", $n, @lines);
	}
	rl_run($s, 'RESET ratelimit.test_clock_ms');
	return @got;
}

# 1a. The statements on the cluster: Redis's answers, the reference.
my $s = rl_session($node);
rl_run($s, "SET ratelimit.failure_mode = 'local'");
my @on_redis = statements($s, 'st_redis');
like($on_redis[0], qr/^90$/, 'statements on Redis: 90 rows over 30 authors admitted');
like($on_redis[1], qr/^90\nERROR:  PT429: .*\nDETAIL:  Key \(author\)=\(a7\) is over the limit/,
	'statements on Redis: a7 over its limit refuses the statement');
like($on_redis[2], qr/^299$/, 'statements on Redis: the refused statement charged no author');
like($on_redis[3], qr/^299\nERROR:  PT429: .*\nDETAIL:  Key \(author\)=\(a1\)/,
	'statements on Redis: a1 full refuses the statement');
like($on_redis[4], qr/^299\nERROR:  PT429: .*\nDETAIL:  Key \(author\)=\(a2\)/,
	'statements on Redis: two rows for a2\'s last unit are refused');
like($on_redis[5], qr/^300$/, 'statements on Redis: a2 had exactly its last unit left');
like($on_redis[6], qr/^302$/, 'statements on Redis: shadow mode lets a refused statement through');
like($on_redis[7], qr/^302\nERROR:  PT429: .*\nDETAIL:  Key \(author\)=\(a5\)/,
	'statements on Redis: and charged nothing (a5 is still full)');
my ($st) = rl_run($s, 'SELECT failures FROM rl_status()');
is($st, '0', 'statements on Redis: no failure');
$s->quit;
my $mark;

# 2. Every master stalled under one session's warm links.  The first
# call on a key of master M waits out its command_timeout (the policy
# answers, M rests, the map is marked stale); the next call on M's key
# fetches the map first, from the other masters of the map, connected and
# well but stalled too.  It must give up on them at its own deadline.
$mark = fault_mark();
{
	my $s = rl_session($node);
	rl_run($s, 'SET ratelimit.command_timeout = 400');
	rl_run($s, 'SET ratelimit.retry_interval = 10000');
	my @keys = map { key_on($masters[$_], "stall$_:", 100) } 0 .. 4;
	my @warm = map { (allow($s, $_, 100))[0] } @keys;
	is("@warm", join(' ', ('t|99') x 5), 'stalled masters: warm links to all five answer');
	$_->stall for @masters;
	my ($o1, $e1, $t1) = allow($s, $keys[0], 100);
	usleep(150_000);    # past the 100 ms between two map fetches
	my ($o2, $e2, $t2) = allow($s, $keys[0], 100);
	$_->resume for @masters;
	is($o1, 't|', 'stalled masters: the first call gets the policy\'s answer');
	is($o2, 't|', 'stalled masters: the call that fetches the map too');
	cmp_ok($t2, '<', 1.0,
		sprintf('stalled masters: the map fetch held the call\'s deadline of 400 ms (%.0f ms; one full timeout per master: 1600)',
			$t2 * 1000));
	note sprintf('stalled masters: first call %.0f ms, map-fetching call %.0f ms', $t1 * 1000, $t2 * 1000);
	fact('figure.030', sprintf('five stalled masters: a call that fetches the slot map took %.0f ms (command_timeout 400)',
			$t2 * 1000));
	$s->quit;
	$rc->wait_ok(15) or die 'cluster not ok after the stall';
}
fault_done('every master stalled while a call fetches the slot map', $mark);

# 3. A backend's budget of external descriptors (a third of max_safe_fds,
# shared with dblink and postgres_fdw) used up by dblink links beside
# warm links to all five masters, then all of it but one.
SKIP:
{
	my $sharedir = `pg_config --sharedir`;
	chomp $sharedir;
	skip 'dblink is not installed', 8
	  unless -f "$sharedir/extension/dblink.control";
	$node->safe_psql('postgres', 'CREATE EXTENSION dblink');
	my $connstr = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres';
	$mark = fault_mark();
	my $s = rl_session($node);
	my @keys = map { key_on($masters[$_], "fd$_:", 100) } 0 .. 4;
	my $many = "SELECT count(remaining) || '/' || count(*) FROM rl_allow_many(ARRAY['"
	  . join("','", @keys) . "'], 'fixed_window', 100, '1 day')";
	is((rl_run($s, $many))[0], '5/5', 'descriptors: warm links to all five masters answer');
	# dblink links until one is refused: how many the budget holds.
	my $fill = sub {
		my $n = 0;
		while ($n < 200)
		{
			my (undef, $err) = rl_run($s,
				"SELECT dblink_connect('l" . ($n + 1) . "', '$connstr')");
			last if $err =~ /ERROR/;
			$n++;
		}
		return $n;
	};
	my $full = $fill->();
	my $links = $full;
	ok($links > 0 && $links < 200, "descriptors: dblink links filled the budget ($links)");

	my ($out, $err) = rl_run($s, $many);
	is($out, '5/5', 'descriptors: none left: the masters waited on in turn, Redis answers');
	unlike($err, qr/ERROR|WARNING/, 'descriptors: none left: no ERROR, no WARNING') or diag($err);

	rl_run($s, "SELECT dblink_disconnect('l$links')");
	$links--;
	($out, $err) = rl_run($s, $many);
	is($out, '5/5', 'descriptors: one left: the wait set takes it, Redis answers');
	unlike($err, qr/ERROR|WARNING/, 'descriptors: one left: no ERROR, no WARNING') or diag($err);

	# Every descriptor reserved went back: the same links fit again.
	rl_run($s, "SELECT dblink_disconnect('l$_')") for 1 .. $links;
	is((rl_run($s, $many))[0], '5/5', 'descriptors: links given back: Redis answers');
	is($fill->(), $full, 'descriptors: the budget holds as many dblink links as before');
	$s->quit;
	fault_done('no external descriptor left, then one, for the wait on all masters', $mark);
}

# 4. One master announces a new address before each map fetch of one
# session, 69 in all, none listening: each call on its key finds the
# address dead (the policy's answer; the failure makes the map stale) and
# the next call fetches the map again from the seed, the master's own
# data port.  The session sees 75 addresses: the seed, the four other
# masters, the 69 dead ones and the last.
$mark = fault_mark();
{
	my $a = $masters[0];
	my $key = key_on($a, 'reg', 100);
	my $s = rl_session($node);
	rl_run($s, "SET ratelimit.redis_nodes = '127.0.0.1:" . $a->port . "'");
	my $policy = 0;
	for my $i (2 .. 70)
	{
		my $r = $a->cmd('CONFIG', 'SET', 'cluster-announce-ip', "127.0.0.$i");
		die "CONFIG SET cluster-announce-ip: ${$r}" if ref $r;
		usleep(110_000);    # past the 100 ms between two map fetches
		my ($out) = allow($s, $key, 100);
		$policy++ if $out eq 't|';
	}
	is($policy, 69, 'registry: the 69 dead addresses, each given the policy\'s answer');
	my ($maps) = rl_run($s, 'SELECT map_refreshes FROM rl_status()');
	cmp_ok($maps, '>=', 69, "registry: a map fetched for each address ($maps)");

	# Now an address the master listens on, new to the session.
	for (['bind', '127.0.0.1 127.0.0.200'], ['cluster-announce-ip', '127.0.0.200'])
	{
		my $r = $a->cmd('CONFIG', 'SET', @$_);
		die "CONFIG SET @$_: ${$r}" if ref $r;
	}
	usleep(110_000);
	my ($out, $err) = allow($s, $key, 100);
	is($out, 't|99', 'registry: the 70th address is followed, Redis answers') or diag($err);
	($out) = allow($s, $key, 100);
	is($out, 't|98', 'registry: and counts');
	my ($last) = rl_run($s, "SELECT coalesce(last_error, '') FROM rl_status()");
	unlike($last, qr/more than/, "registry: no failure for want of room ($last)");
	is($rc->key_cmd("rl:{$dboid:$key}:fixed_window:100:86400000ms", 'EXISTS',
			"rl:{$dboid:$key}:fixed_window:100:86400000ms"), 1,
		'registry: the key is on the master');
	$s->quit;
	for (['cluster-announce-ip', ''], ['bind', '127.0.0.1'])
	{
		my $r = $a->cmd('CONFIG', 'SET', @$_);
		die "CONFIG SET @$_: ${$r}" if ref $r;
	}
	fact('figure.030', 'one session saw 75 cluster node addresses (64 held at a time): answered by Redis at the last');
}
fault_done('a master on 70 addresses over one session (more than the 64 nodes held)', $mark);

# 1b. The cluster down (every master killed): the local engine answers
# the same statements, both rounds, exactly as the cluster did.
$mark = fault_mark();
$rc->kill_node($_) for $rc->nodes;
$s = rl_session($node);
rl_run($s, "SET ratelimit.failure_mode = 'local'");
my ($l0) = rl_run($s, 'SELECT fail_local FROM rl_stats()');
my @on_local = statements($s, 'st_local');
for my $i (0 .. $#statements)
{
	is($on_local[$i], $on_redis[$i],
		"cluster down, failure_mode local: statement " . ($i + 1) . " answered as the cluster did");
}
my ($l1) = rl_run($s, 'SELECT fail_local FROM rl_stats()');
cmp_ok($l1 - $l0, '>=', 2 * 30, "cluster down: the local engine answered both rounds' scripts (@{[ $l1 - $l0 ]})");
($st) = rl_run($s, 'SELECT count(*) FROM st_local');
is($st, '302', 'cluster down: the rows admitted (300) and let through in shadow mode (2)');
$s->quit;
fault_done('cluster down, failure_mode local: statements over many slots', $mark);

done_testing();
