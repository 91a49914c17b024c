# test/t/017_late_read.pl
#
# A reply that arrived while the backend was busy past its deadline.
# Between sending a statement trigger's script and reading its reply the
# backend flushes the transaction's pending WAL (once 1 MB or more waits),
# so a slow fsync can use up command_timeout while Redis has long replied.  The reply in the
# socket must be read and used: giving up without reading it dropped the
# link and answered by policy a call that Redis had run and counted.
#
# The slow fsync is real: strace delays the backend's fdatasync calls.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use IPC::Run;

use RLRedis qw(rl_node rl_session rl_run rl_wait_for fact fault_mark fault_done);

plan skip_all => 'strace is not installed'
  unless grep { -x "$_/strace" } split /:/, $ENV{PATH} . ':/usr/bin';

my $redis = RLRedis->new(name => 'r017');
# The test clusters run with fsync off; this one syncs its WAL, and its
# WAL writer must not flush the test's WAL first.
my $node = rl_node('c017', $redis, qq{
fsync = on
wal_sync_method = fdatasync
wal_writer_delay = 10000
});
my $dboid = $node->safe_psql('postgres',
	'SELECT oid FROM pg_database WHERE datname = current_database()');
$node->safe_psql('postgres', q{
CREATE TABLE filler (id int, k text, pad text);
CREATE TRIGGER filler_limit AFTER INSERT ON filler REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('k', 'fixed_window', '100000', '1 hour');
});

my $s = rl_session($node);
my ($pid) = rl_run($s, 'SELECT pg_backend_pid()');
is((rl_run($s, "SELECT remaining FROM rl_allow('warm', 'fixed_window', 10, '1 hour')"))[0],
	'9', 'warm-up: connected');
# The trigger's script too, so that the call below is one EVALSHA.
rl_run($s, "INSERT INTO filler VALUES (0, 'warm', '')");

# Every fdatasync of the backend takes 800 ms, past the 300 ms timeout.
my ($out, $err) = ('', '');
my $strace = IPC::Run::start(
	[ 'strace', '-p', $pid, '-e', 'trace=fdatasync', '-e',
		'inject=fdatasync:delay_enter=800000', '-o', '/dev/null' ],
	'<', \undef, '>', \$out, '2>', \$err);
my $attached = rl_wait_for(sub { $strace->pump_nb; $err =~ /attached/ }, 10);
SKIP:
{
	skip "strace could not attach to the backend: $err", 6
	  unless defined $attached;

	my $mark = fault_mark();
	rl_run($s, 'BEGIN');
	my ($res, $e, $took) = rl_run($s,
		"INSERT INTO filler SELECT g, 'late', repeat('x', 200) FROM generate_series(1, 10000) g");
	my ($in) = rl_run($s, "SELECT count(*) FROM filler WHERE k = 'late'");
	rl_run($s, 'COMMIT');
	cmp_ok($took, '>', 0.3,
		sprintf('the WAL flush between send and read outlasted command_timeout (%.0f ms)',
			$took * 1000));
	is("$in|$e", '10000|', "the late reply is Redis's answer: the statement's rows are in, no error");
	unlike($e, qr/WARNING/, 'no WARNING: Redis did answer');
	my ($st) = rl_run($s, 'SELECT failures, fail_open, connected FROM rl_status()');
	is($st, '0|0|t', 'no failure recorded, no policy answer, link kept');
	is($redis->fw_used("rl:{$dboid:public.filler:k='late'}:fixed_window:100000:3600000ms"), 10000,
		'Redis counted the statement\'s rows once');
	is((rl_run($s, "SELECT remaining FROM rl_allow('late', 'fixed_window', 10, '1 hour')"))[0],
		'9', 'the next call on the same link gets its own answer');
	fault_done('a reply read after the deadline, behind a slow WAL fsync', $mark);
}
$strace->kill_kill;

$s->quit;
done_testing();
