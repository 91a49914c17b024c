# test/t/021_cluster_faults.pl
#
# Redis Cluster, the rest of issue 12, against a real local cluster of 3
# masters and 3 replicas (test/perl/RLCluster.pm):
#   1. the statement trigger with keys in many slots: one script per
#      slot; an admitted statement charges every key exactly its rows, a
#      refused one charges no key on any master; racing statements never
#      admit more than the limit (a race may charge keys of a statement
#      that was then refused: recorded);
#   2. exact counts with 32 sessions on one key and on 200 keys spread
#      over every master;
#   3. pgbench during `redis-cli --cluster reshard` and during a manual
#      MIGRATING/IMPORTING of a hot key's slot: counts exact, no policy
#      answer, rl_status().redirects and map_refreshes count;
#   4. the traps of phase 1: a TRYAGAIN rests only its keys, not the
#      master; a closed-mode policy answer tells the key's own node's wait;
#      the deny cache notices a redis_nodes change;
#   5. a master killed with kill -9 under load: what was lost is recorded,
#      nothing is counted twice.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;

use RLRedis qw(rl_node rl_session rl_run rl_load rl_wait_for fact fault_mark fault_done);
use RLCluster;

my $rc = RLCluster->new(name => 'c21_');
my @masters = $rc->masters;
is(scalar @masters, 3, 'three masters serve the slots');
my $seeds = $rc->seeds;
my $node = rl_node('c021', $masters[0], qq{
ratelimit.redis_mode = 'cluster'
ratelimit.redis_nodes = '$seeds'
ratelimit.deny_cache = off
});
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');

# The Redis key of rl_allow(key, algo, limit, '1 day'), and of a
# trigger's key (fixed_window, limit, '1 day'): a limiter's parameters
# are part of its name.
sub redis_key
{
	my ($key, $algo, $limit) = @_;
	(my $esc = $key) =~ s/%/%25/g;
	$esc =~ s/\}/%7D/g;
	return "rl:{$dboid:$esc}:$algo:$limit:86400000ms";
}

sub trigger_key
{
	my ($table, $col, $value, $limit) = @_;
	return "rl:{$dboid:public.$table:$col='$value'}:fixed_window:$limit:86400000ms";
}

# A counter's value on the master that serves its key (0 when absent).
sub count_of
{
	my ($rk) = @_;
	return $rc->master_of_slot(RLCluster::slot_of($rk))->fw_used($rk) // 0;
}

my $script_no = 0;

# Starts pgbench; the returned sub waits for it: (exit code, out, err).
sub pgbench
{
	my ($clients, $how, $script) = @_;
	my $file = $node->basedir . '/bench' . ++$script_no . '.sql';
	PostgreSQL::Test::Utils::append_to_file($file, $script);
	my ($o, $e) = ('', '');
	my $h = IPC::Run::start [
		'pgbench', '-n', '-c', $clients, '-j', 2, @$how,
		'-f', $file, '-h', $node->host, '-p', $node->port, 'postgres'
	  ],
	  '<', \undef, '>', \$o, '2>', \$e;
	return sub {
		$h->finish;
		fact('calls.021', ($o =~ /actually processed: (\d+)/)[0] // 0);
		return ($? >> 8, $o, $e);
	};
}

$node->safe_psql('postgres',
	'CREATE UNLOGGED TABLE hits (k text, allowed bool, known bool)');
my $mark;

# 1. The statement trigger over many slots.
$node->safe_psql('postgres', q{
CREATE TABLE st (author text);
CREATE TRIGGER st_limit AFTER INSERT ON st REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author', 'fixed_window', '10', '1 day');
});
my @st = map { "st$_" } 1 .. 30;
my %st_masters = map { $rc->master_of_slot(RLCluster::slot_of(trigger_key('st', 'author', $_, 10)))->port => 1 } @st;
is(scalar keys %st_masters, 3, 'statement: the 30 keys fall on all three masters');
my ($sr, $so, $se) = $node->psql('postgres',
	"INSERT INTO st SELECT 'st' || k FROM generate_series(1, 30) k, generate_series(1, 3)");
is($sr, 0, 'statement: 90 rows over 30 keys in many slots are admitted') or diag($se);
is(scalar(grep { count_of(trigger_key('st', 'author', $_, 10)) == 3 } @st), 30,
	'statement: each key is charged exactly its 3 rows on its own master');
($sr, $so, $se) = $node->psql('postgres',
	"\\set VERBOSITY verbose\nINSERT INTO st SELECT 'st' || k FROM generate_series(1, 30) k "
	  . "UNION ALL SELECT 'st7' FROM generate_series(1, 7)");
like($se, qr/ERROR:\s+PT429/, 'statement: one key over its limit refuses the statement (PT429)');
like($se, qr/author\)=\(st7\)/, 'statement: the refusal names the key over its limit');
is(scalar(grep { count_of(trigger_key('st', 'author', $_, 10)) == 3 } @st), 30,
	'statement: the refused statement charged no key on any master (check round)');
is($node->safe_psql('postgres', 'SELECT count(*) FROM st'), '90', 'statement: its rows are gone');
($sr, $so, $se) = $node->psql('postgres',
	"SET ratelimit.enforce = off;\nINSERT INTO st SELECT 'st' || k FROM generate_series(1, 30) k "
	  . "UNION ALL SELECT 'st7' FROM generate_series(1, 7)");
is($sr, 0, 'statement: shadow mode lets the statement through') or diag($se);
is(scalar(grep { count_of(trigger_key('st', 'author', $_, 10)) == 3 } @st), 30,
	'statement: shadow mode charged no key either (the check round refused)');

# Racing statements: 8 sessions insert one row for each of 8 keys (in 8
# slots) per statement, 25 statements each, against a limit of 60.  A
# statement may pass the check round and then be refused in the consume
# round, after another took the last units: keys it charged stay charged.
# Never more than 60 admitted per key.
$node->safe_psql('postgres', q{
CREATE TABLE race (author text);
CREATE TRIGGER race_limit AFTER INSERT ON race REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author', 'fixed_window', '60', '1 day');
CREATE TABLE refused (n int);
});
my $wait = pgbench(8, [ '-t', 25 ], q{
DO $$ BEGIN
	INSERT INTO race SELECT 'r' || g FROM generate_series(1, 8) g;
EXCEPTION WHEN sqlstate 'PT429' THEN
	INSERT INTO refused VALUES (1);
END $$;
});
my ($brc, $bout, $berr) = $wait->();
is($brc, 0, 'race: pgbench ran clean') or diag($berr);
my $admitted = $node->safe_psql('postgres', "SELECT count(*) FROM race WHERE author = 'r1'");
my $refused = $node->safe_psql('postgres', 'SELECT count(*) FROM refused');
is($admitted + $refused, 200, 'race: 200 statements, each admitted or refused');
my @rc = map { count_of(trigger_key('race', 'author', "r$_", 60)) } 1 .. 8;
is($node->safe_psql('postgres',
		"SELECT count(DISTINCT c) FROM (SELECT count(*) c FROM race GROUP BY author) s"),
	'1', 'race: every admitted statement wrote all 8 keys');
cmp_ok($admitted, '<=', 60, "race: at most the limit admitted ($admitted statements)");
is(scalar(grep { $_ <= 60 && $_ >= $admitted } @rc), 8,
	'race: every key\'s count lies between the rows admitted and the limit');
my $overcharge = 0;
$overcharge += $_ - $admitted for @rc;
note "race: $admitted admitted, $refused refused, counts @rc, $overcharge units charged by refused statements";
fact('cluster_statement_race_overcharge.021', $overcharge);

# The race made certain: a statement over keys on three masters, one of
# them stalled so that its check-round reply is slow, and meanwhile
# another statement takes the last unit of the statement's key on the
# second master.  The stalled master's check is never answered (the
# policy admits that key, and check-only means nothing ran there that
# counts); the consume round then finds the second key exhausted and
# refuses the statement, while the third master's key was charged; the
# refused statement's abort gives that charge back (refunds, the
# triggers' default since 0.6.0), and no key is over its limit.
$node->safe_psql('postgres', q{
CREATE TABLE race2 (author text);
CREATE TRIGGER race2_limit AFTER INSERT ON race2 REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author', 'fixed_window', '10', '1 day');
});
my %on;
for my $i (1 .. 200)
{
	my $p = $rc->master_of_slot(RLCluster::slot_of(trigger_key('race2', 'author', "a$i", 10)))->port;
	$on{$p} //= "a$i";
}
# The stalled master is the one read last (its slots sort last), so the
# others' check replies are in before its wait runs out; the stall stays
# well under the cluster's node timeout (1 s), so no fail-over starts.
my %first_slot;
for my $r ($rc->slot_ranges)
{
	$first_slot{ $r->[2] } = $r->[0]
	  if !defined $first_slot{ $r->[2] } || $r->[0] < $first_slot{ $r->[2] };
}
my @bym = sort { $first_slot{ $a->port } <=> $first_slot{ $b->port } } @masters;
my ($kb, $kc, $ka) = map { $on{ $_->port } } @bym;
my $stalled = $bym[2];
$node->safe_psql('postgres', "INSERT INTO race2 SELECT '$kb' FROM generate_series(1, 9)");
my ($s1, $s2) = (rl_session($node), rl_session($node));
rl_run($s1, 'SET ratelimit.command_timeout = 500');
rl_run($_, "SELECT count(*) FROM rl_allow('c21:warm', 'fixed_window', 10, '1 day')") for $s1, $s2;
$mark = fault_mark();
$stalled->stall;
RLRedis::rl_start($s1, "INSERT INTO race2 VALUES ('$ka'), ('$kb'), ('$kc')");
usleep(150_000);
my ($r2o, $r2e) = rl_run($s2, "INSERT INTO race2 VALUES ('$kb')");
my ($s1o, $s1e) = RLRedis::rl_finish($s1);
$stalled->resume;
unlike($r2e, qr/ERROR/, 'race: the other statement took the last unit meanwhile') or diag($r2e);
like($s1e, qr/ERROR:\s+PT429/, 'race: the statement passed the check round and was refused in the consume round')
  or diag($s1e);
usleep(300_000);
is(join(' ', map { count_of(trigger_key('race2', 'author', $_, 10)) } $ka, $kb, $kc), '0 10 0',
	'race: the stalled master\'s key is uncharged (check only), the exhausted key at its limit, the third given back when the refused statement aborted');
$_->quit for $s1, $s2;
@masters = $rc->masters;
fault_done('cluster statement trigger race between check and consume', $mark);

# 2. Exact counts: 32 sessions, one hot key and 200 keys over all masters.
my %calls0 = map { $_->port => $_->script_runs(all => 1) } @masters;
$wait = pgbench(32, [ '-t', 20 ], q{
INSERT INTO hits SELECT 'hot', allowed, remaining IS NOT NULL
FROM rl_allow('c21:hot', 'fixed_window', 300, '1 day');
\set n random(1, 200)
INSERT INTO hits SELECT 'k' || :n, allowed, remaining IS NOT NULL
FROM rl_allow('c21:k' || :n, 'fixed_window', 3, '1 day');
});
($brc, $bout, $berr) = $wait->();
is($brc, 0, 'counts: pgbench with 32 sessions ran clean') or diag($berr);
is($node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE allowed), count(*) FROM hits WHERE k = 'hot'"),
	'300|640', 'counts: 640 calls from 32 sessions on one key admit exactly 300');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM (SELECT k, count(*) FILTER (WHERE allowed) a, count(*) n "
		  . "FROM hits WHERE k LIKE 'k%' GROUP BY k) s WHERE a <> least(n, 3)"),
	'0', 'counts: each of the 200 keys admits exactly min(calls, 3)');
is($node->safe_psql('postgres', 'SELECT count(*) FROM hits WHERE NOT known'), '0',
	'counts: no policy answers');
my $hot_n = count_of(redis_key('c21:hot', 'fixed_window', 300));
is($hot_n, 300, 'counts: the hot key reads 300 on its master');
fact('count_checks.021', 640);
fact('miscounted.021', abs($hot_n - 300));
my @work = map { $_->script_runs(all => 1) - $calls0{ $_->port } } @masters;
is(scalar(grep { $_ > 100 } @work), 3, "counts: every master did its share (script calls @work)");
fact('cluster_32_sessions_calls_per_master.021', join('/', @work));
fact('clients.021', 32);

# 3. Redirects under load.  A session of our own keeps its counters.
my $sess = rl_session($node);
my ($st0) = rl_run($sess, "SELECT allowed FROM rl_allow('c21:warm', 'fixed_window', 10, '1 day')");
my ($maps) = rl_run($sess, 'SELECT map_refreshes FROM rl_status()');
is($maps, 1, 'status: the first call fetched the slot map once (map_refreshes)');

# While slots move, a master rewrites nodes.conf in its main thread at
# every CLUSTER SETSLOT (about 200 times on each of the two masters of a
# 100-slot reshard; fsync too when it takes a slot).  On a busy disk one
# rewrite can hold it past the 300 ms command_timeout: the calls in flight
# get the policy's answer (counted by Redis all the same), and the node
# rests for retry_interval (seen: 499 policy answers).  What this phase
# tests is the redirects, not latency: its sessions wait up to 5 s.
my $redirect_timeout = '-c ratelimit.command_timeout=5000';
rl_run($sess, 'SET ratelimit.command_timeout = 5000');

# Keys in the first slots of the first master's range, which the reshard
# below moves to the second master.
my ($src, $dst) = @masters[ 0, 1 ];
my ($range) = sort { $a->[0] <=> $b->[0] } grep { $_->[2] == $src->port } $rc->slot_ranges;
my @rs;
for (my $i = 0; @rs < 40 && $i < 200_000; $i++)
{
	my $s = RLCluster::slot_of(redis_key("rs$i", 'fixed_window', 1000000));
	push @rs, "rs$i" if $s >= $range->[0] && $s < $range->[0] + 100;
}
is(scalar @rs, 40, 'reshard: 40 keys in the slots to be moved');
my $rsarr = 'ARRAY[' . join(',', map { "'$_'" } @rs) . ']';
my $rsql = "INSERT INTO hits SELECT 'rs:' || key, allowed, remaining IS NOT NULL "
  . "FROM rl_allow_many($rsarr, 'fixed_window', 1000000, '1 day')";
$node->safe_psql('postgres', 'TRUNCATE hits');
my $rlog = -s $node->logfile;
{
	local $ENV{PGOPTIONS} = $redirect_timeout;
	$wait = pgbench(3, [ '-T', 3 ], "\\set n random(0, 39)\n"
		  . "INSERT INTO hits SELECT 'rs:' || ($rsarr)[1 + :n], allowed, remaining IS NOT NULL "
		  . "FROM rl_allow(($rsarr)[1 + :n], 'fixed_window', 1000000, '1 day');\n");
}
$mark = fault_mark();
usleep(500_000);
my ($rout, $rerr) = ('', '');
my $reshard = IPC::Run::start [
	RLRedis::rl_bin('cli'), '--cluster', 'reshard', '127.0.0.1:' . $src->port,
	'--cluster-from', $rc->id_of($src), '--cluster-to', $rc->id_of($dst),
	'--cluster-slots', 100, '--cluster-yes'
  ],
  '<', \undef, '>', \$rout, '2>', \$rerr;
my $session_calls = 0;
while ($reshard->pumpable)
{
	rl_run($sess, $rsql);
	$session_calls += 40;
	$reshard->pump_nb;
	usleep(20_000);
}
$reshard->finish;
is($?, 0, 'reshard: redis-cli --cluster reshard moved 100 slots') or diag("$rout\n$rerr");
$rc->wait_ok(10);
for (1 .. 5)
{
	rl_run($sess, $rsql);
	$session_calls += 40;
}
($brc, $bout, $berr) = $wait->();
is($brc, 0, 'reshard: pgbench ran clean') or diag($berr);
is($rc->master_of_slot($range->[0])->port, $dst->port, 'reshard: the slots are on the second master now');
my $rpolicy = $node->safe_psql('postgres', "SELECT count(*) FROM hits WHERE NOT known");
is($rpolicy, '0', 'reshard: no policy answer during the reshard');
my $mismatch = 0;
my $answered = 0;
my @rdiag;
for my $k (@rs)
{
	my ($n, $u) = split /\|/, $node->safe_psql('postgres',
		"SELECT count(*), count(*) FILTER (WHERE NOT known) FROM hits WHERE k = 'rs:$k'");
	$answered += $n;
	my $c = count_of(redis_key($k, 'fixed_window', 1000000));
	$mismatch++ if $c != $n;
	fact('miscounted.021', abs($c - $n)) if $c != $n;
	push @rdiag, "  $k: $n calls, $u policy answers, $c counted" if $c != $n || $u;
}
fact('count_checks.021', $answered);
is($mismatch, 0, "reshard: each key's count on its new master equals its calls ($answered calls)");
# On either failure: the keys concerned, and what the server log says of
# Redis meanwhile.
if ($mismatch || $rpolicy)
{
	diag($_) for @rdiag;
	my $log = substr(slurp_file($node->logfile), $rlog);
	diag($_) for grep { /WARNING|DETAIL|HINT/ } split /\n/, $log;
	diag("redis-cli --cluster reshard: $_") for grep { /ERR|WARN|fail/i } split /\n/, "$rout\n$rerr";
}
my ($redir) = rl_run($sess, 'SELECT redirects, map_refreshes FROM rl_status()');
my ($nredir, $nmaps) = split /\|/, $redir;
cmp_ok($nredir, '>', 0, "reshard: rl_status().redirects counts the MOVED/ASK followed ($nredir)");
cmp_ok($nmaps, '>', 1, "reshard: the map was fetched again ($nmaps map_refreshes)");
fact('cluster_reshard_redirects.021', $nredir);
fault_done('cluster reshard under load', $mark);

# A manual MIGRATING/IMPORTING of a hot key's slot under load: ASK while
# the key is in flight, then MOVED; the count goes on exactly.  The limit
# leaves room for every call: a denial writes nothing, so once a limit is
# used up a call counted twice, or lost, no longer shows (a limit of 2000
# was used up before the migration began).  Exact counts at a limit under
# load are phase 2's.
my $hk = 'c21:hotmig';
my $hlim = 1000000;
my $hrk = redis_key($hk, 'fixed_window', $hlim);
my $hslot = RLCluster::slot_of($hrk);
my $hsrc = $rc->master_of_slot($hslot);
my ($hdst) = grep { $_->port != $hsrc->port } $rc->masters;
$node->safe_psql('postgres', 'TRUNCATE hits');
my ($r0) = rl_run($sess, 'SELECT redirects FROM rl_status()');
$mark = fault_mark();
{
	local $ENV{PGOPTIONS} = $redirect_timeout;
	$wait = pgbench(3, [ '-T', 3 ], qq{
INSERT INTO hits SELECT 'hot', allowed, remaining IS NOT NULL
FROM rl_allow('$hk', 'fixed_window', $hlim, '1 day');
});
}
# Twenty calls a statement, each row its own: the argument that uses g
# makes PostgreSQL call rl_allow again for every row (a FROM item that
# does not use the row is called once and its one row joined to all 20).
my $hsql = "INSERT INTO hits SELECT 'hot:batch', allowed, remaining IS NOT NULL "
  . "FROM generate_series(1, 20) g, "
  . "LATERAL rl_allow('$hk', 'fixed_window', $hlim, '1 day', 1 + 0 * g)";
usleep(500_000);
rl_run($sess, $hsql);
$rc->migrate_begin($hslot, $hsrc, $hdst);
rl_run($sess, $hsql) for 1 .. 3;
my $hm = $hsrc->cmd('MIGRATE', '127.0.0.1', $hdst->port, $hrk, 0, 5000);
is($hm, 'OK', 'migrate: the hot key moved to the importing master');
rl_run($sess, $hsql) for 1 .. 5;
$rc->migrate_end($hslot, $hsrc, $hdst);
rl_run($sess, $hsql) for 1 .. 5;
($brc, $bout, $berr) = $wait->();
is($brc, 0, 'migrate: pgbench ran clean') or diag($berr);
my ($hall, $hallowed, $hpolicy) = split /\|/, $node->safe_psql('postgres',
	"SELECT count(*), count(*) FILTER (WHERE allowed), count(*) FILTER (WHERE NOT known) FROM hits");
is($hpolicy, 0, 'migrate: no policy answer');
is($hallowed, $hall, "migrate: every call admitted ($hall calls)");
my $hn = $hdst->fw_used($hrk) // 0;
is($hn, $hallowed, 'migrate: the count on the new master equals the calls admitted');
# On a mismatch: what every node holds of the key, and the calls by
# source (pgbench's 'hot', the session's 'hot:batch').
if ($hn != $hallowed || $hallowed != $hall)
{
	diag('migrate: from ' . $hsrc->port . ' to ' . $hdst->port . ", slot $hslot");
	for my $n ($rc->alive)
	{
		my $line = eval {
			$n->cmd('READONLY');
			my $role = $n->cmd('ROLE');
			sprintf('  %d %s: %s', $n->port, ref $role eq 'ARRAY' ? $role->[0] : '?',
				$n->fw_used($hrk) // 'no key');
		} // "  " . $n->port . ": $@";
		diag($line);
	}
	diag($node->safe_psql('postgres',
		"SELECT k, count(*), count(*) FILTER (WHERE allowed) FROM hits GROUP BY k"));
	diag(scalar $hdst->cmd('CLUSTER', 'NODES'));
}
fact('count_checks.021', $hall);
fact('miscounted.021', abs($hn - $hallowed));
my ($r1) = rl_run($sess, 'SELECT redirects FROM rl_status()');
cmp_ok($r1 - $r0, '>=', 2, 'migrate: rl_status().redirects counted the ASK and the MOVED ('
	  . ($r1 - $r0) . ')');
fault_done('cluster manual slot migration of a hot key under load', $mark);
rl_run($sess, 'RESET ratelimit.command_timeout');

# 4. TRYAGAIN concerns only the split keys: the master's other slots are
# served at once (phase 1 rested the whole master for retry_interval).
my $tk = 'c21:try';
my $tfw = "rl:{$dboid:$tk}:fixed_window:10:86400000ms";
my $layered = qq{SELECT allowed, remaining FROM rl_allow_layered('$tk',
	ARRAY[('fixed_window', 10, '1 day'), ('sliding_log', 100, '1 second')]::rl_rule[])};
my ($to1) = rl_run($sess, $layered);
is($to1, 't|9', 'TRYAGAIN: the layered call is answered before the migration');
my $tslot = RLCluster::slot_of($tfw);
my $tsrc = $rc->master_of_slot($tslot);
my ($tdst) = grep { $_->port != $tsrc->port } $rc->masters;
my ($near) = grep {
	my $s = RLCluster::slot_of(redis_key($_, 'fixed_window', 10));
	$s != $tslot && $rc->master_of_slot($s)->port == $tsrc->port
} map { "c21:near$_" } 1 .. 200;
$mark = fault_mark();
$rc->migrate_begin($tslot, $tsrc, $tdst);
$tsrc->cmd('MIGRATE', '127.0.0.1', $tdst->port, $tfw, 0, 5000);
my ($to2) = rl_run($sess, $layered);
is($to2, 't|', 'TRYAGAIN: split keys get the policy\'s answer');
my ($no) = rl_run($sess, "SELECT allowed, remaining FROM rl_allow('$near', 'fixed_window', 10, '1 day')");
is($no, 't|9', 'TRYAGAIN: another key of the same master is answered by Redis at once');
$rc->migrate_end($tslot, $tsrc, $tdst);
fault_done('cluster TRYAGAIN on a split layered key', $mark);

# Too many redirects concern the keys that hit the bound, not the master:
# a slot MIGRATING on its master to a node that does not import it sends
# the key round in a loop (ASK there, MOVED back) until the bound on hops.
# That key gets the policy's answer; the batch's other keys, on the same
# master too, are Redis's; the master serves the next call at once, on the
# same link (no new connection).
my $lk = (grep { !defined $tsrc->fw_used(redis_key($_, 'fixed_window', 10)) }
	  grep { $rc->master_of_slot(RLCluster::slot_of(redis_key($_, 'fixed_window', 10)))->port == $tsrc->port }
	  map { "c21:loop$_" } 1 .. 200)[0];
my $lslot = RLCluster::slot_of(redis_key($lk, 'fixed_window', 10));
my @lothers = grep { RLCluster::slot_of(redis_key($_, 'fixed_window', 10)) != $lslot } map { "c21:lo$_" } 1 .. 30;
my ($lnear) = grep { $rc->master_of_slot(RLCluster::slot_of(redis_key($_, 'fixed_window', 10)))->port == $tsrc->port } @lothers;
my @lbatch = ($lk, @lothers);
my $larr = 'ARRAY[' . join(',', map { "'$_'" } @lbatch) . ']';
my ($l0) = rl_run($sess, 'SELECT connects, failures FROM rl_status()');
$mark = fault_mark();
my $lr = $tsrc->cmd('CLUSTER', 'SETSLOT', $lslot, 'MIGRATING', $rc->id_of($tdst));
die "SETSLOT failed: ${$lr}" if ref $lr;
my ($lrows, $lerr) = rl_run($sess,
	"SELECT string_agg(CASE WHEN remaining IS NULL THEN 'p' ELSE 'r' END, '' ORDER BY n) "
	  . "FROM rl_allow_many($larr, 'fixed_window', 10, '1 day') WITH ORDINALITY AS t(key, allowed, remaining, retry_after_ms, reset_after_ms, n)");
like($lerr, qr/too many cluster redirects for hash slot $lslot/, 'redirect loop: the bound on hops is reported')
  or diag($lerr);
is($lrows, 'p' . ('r' x @lothers), 'redirect loop: only the looping key gets the policy answer, the batch\'s others are Redis\'s');
my ($lo) = rl_run($sess, "SELECT allowed, remaining FROM rl_allow('$lnear', 'fixed_window', 10, '1 day')");
is($lo, 't|8', 'redirect loop: the same master answers another key at once');
my ($l1) = rl_run($sess, 'SELECT connects, failures FROM rl_status()');
my ($c0l, $f0l) = split /\|/, $l0;
my ($c1l, $f1l) = split /\|/, $l1;
is($c1l, $c0l, 'redirect loop: no link was dropped (no new connection)');
is($f1l - $f0l, 1, 'redirect loop: one failure recorded');
$lr = $tsrc->cmd('CLUSTER', 'SETSLOT', $lslot, 'STABLE');
die "SETSLOT STABLE failed: ${$lr}" if ref $lr;
fault_done('cluster redirect loop on one slot', $mark);

# Closed mode: a policy answer tells the wait of the key's own node.  The
# first master's keys come first in the batch, the other masters' are
# read after it, so "the node touched last" would be a healthy one.
usleep(300_000);
my %bk;
for my $i (1 .. 60)
{
	my $k = "c21:closed$i";
	push @{ $bk{ $rc->master_of_slot(RLCluster::slot_of(redis_key($k, 'fixed_window', 10)))->port } }, $k;
}
my @bm = $rc->masters;
my $slow = $bm[0];
my @batch = (@{ $bk{ $slow->port } }, map { @{ $bk{ $_->port } } } @bm[ 1 .. $#bm ]);
my $arr = 'ARRAY[' . join(',', map { "'$_'" } @batch) . ']';
rl_run($sess, "SET ratelimit.failure_mode = closed; SET ratelimit.retry_interval = 5000");
rl_run($sess, "SELECT count(*) FROM rl_allow_many($arr, 'fixed_window', 10, '1 day')");
$mark = fault_mark();
$slow->stall;
my ($waits) = rl_run($sess,
	"SELECT string_agg(CASE WHEN remaining IS NULL THEN retry_after_ms::text ELSE 'r' END, ' ') "
	  . "FROM rl_allow_many($arr, 'fixed_window', 10, '1 day')");
$slow->resume;
my @w = split / /, $waits;
my $nslow = @{ $bk{ $slow->port } };
is(scalar(grep { $_ ne 'r' && $_ > 4000 } @w[ 0 .. $nslow - 1 ]), $nslow,
	'closed: the stalled master\'s keys are told its retry_interval wait');
is(scalar(grep { $_ eq 'r' } @w[ $nslow .. $#w ]), @w - $nslow, 'closed: the other masters\' keys are Redis\'s');
rl_run($sess, 'RESET ratelimit.failure_mode; RESET ratelimit.retry_interval');
fault_done('cluster closed-mode waits per node', $mark);

# The deny cache is emptied when redis_nodes changes (another cluster's
# limiters are other limiters): the next call asks Redis.
my $dsess = rl_session($node);
rl_run($dsess, 'SET ratelimit.deny_cache = on');
rl_run($dsess, "SELECT allowed FROM rl_allow('c21:deny', 'fixed_window', 1, '1 day')") for 1 .. 3;
my ($c0) = rl_run($dsess, 'SELECT cached FROM rl_status()');
cmp_ok($c0, '>=', 1, 'deny cache: the denial was answered from the cache');
my $reseeds = join ',', reverse split /,/, $seeds;
rl_run($dsess, "SET ratelimit.redis_nodes = '$reseeds'");
my ($d1) = rl_run($dsess, "SELECT allowed FROM rl_allow('c21:deny', 'fixed_window', 1, '1 day')");
my ($c1) = rl_run($dsess, 'SELECT cached FROM rl_status()');
is("$d1|$c1", "f|$c0", 'deny cache: after a redis_nodes change Redis answers, not the cache');
$dsess->quit;

# 5. kill -9 of a master under load: its keys get policy answers until the
# replica takes over.  Recorded: calls Redis acknowledged and then lost
# with the master (asynchronous replication); asserted: nothing counted
# twice (a key's count is at most the calls that may have run).
$node->safe_psql('postgres', 'TRUNCATE hits');
my $victim = ($rc->masters)[-1];
my @vk = grep {
	$rc->master_of_slot(RLCluster::slot_of(redis_key($_, 'fixed_window', 1000000)))->port == $victim->port
} map { "c21:kill$_" } 1 .. 100;
my $vkarr = 'ARRAY[' . join(',', map { "'$_'" } @vk) . ']';
my $nvk = @vk;
# The load runs until the replica took over and the policy answered
# calls, however long that takes: a load of fixed length could end before
# the kill on a slow machine.
$mark = fault_mark();
my $vcalls0 = $victim->script_runs(all => 1);
my $load = rl_load($node, 4, "\\set n random(1, $nvk)\n"
	  . "INSERT INTO hits SELECT ($vkarr)[0 + :n], allowed, remaining IS NOT NULL "
	  . "FROM rl_allow(($vkarr)[0 + :n], 'fixed_window', 1000000, '1 day');\n");
rl_wait_for(sub { $victim->script_runs(all => 1) - $vcalls0 >= 100 }, 60);
$rc->kill_node($victim);
my $promo = $rc->wait_promoted(20);
ok(defined $promo, 'kill: the replica took over');
rl_wait_for(sub {
	$node->safe_psql('postgres', 'SELECT count(*) FROM hits WHERE NOT known') > 0
}, 30);
my ($kclean, $kcalls, $kerr) = $load->();
fact('calls.021', $kcalls);
is($kclean, 4, 'kill: the 4 pgbench clients ran clean until stopped (policy answers, no errors)') or diag($kerr);
my ($lost, $doubled, $kn, $ku) = (0, 0, 0, 0);
for my $k (@vk)
{
	my ($known, $unknown) = split /\|/, $node->safe_psql('postgres',
		"SELECT count(*) FILTER (WHERE known), count(*) FILTER (WHERE NOT known) FROM hits WHERE k = '$k'");
	my $n = count_of(redis_key($k, 'fixed_window', 1000000));
	$kn += $known;
	$ku += $unknown;
	$lost += $known - $n if $n < $known;
	$doubled += $n - $known - $unknown if $n > $known + $unknown;
}
is($doubled, 0, 'kill: no key counts more than the calls that may have run');
cmp_ok($ku, '>', 0, "kill: the dead master's keys got policy answers ($ku)");
cmp_ok($kn, '>', 0, "kill: Redis answered the others ($kn)");
note sprintf('kill: %d answered by Redis, %d by the policy, %d acknowledged then lost, promoted after %.2f s',
	$kn, $ku, $lost, $promo // -1);
fact('cluster_kill_acknowledged.021', $kn);
fact('cluster_kill_policy.021', $ku);
fact('cluster_kill_lost.021', $lost);
# Checked exactly: nothing doubled (a loss in a fail-over is recorded above,
# not counted here: the README promises no more for asynchronous replicas).
fact('count_checks.021', $kn);
fact('miscounted.021', $doubled);
fault_done('cluster master killed under load', $mark);

$sess->quit;
done_testing();
