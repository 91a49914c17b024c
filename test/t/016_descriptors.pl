# test/t/016_descriptors.pl
#
# A backend out of external file descriptors.  PostgreSQL gives each
# backend a budget of descriptors for sockets and the like (a third of
# max_safe_fds), which dblink, postgres_fdw and this extension share; a
# Redis link needs two, its socket and its wait set's epoll descriptor.
# With the budget used up by dblink connections, or all but one of it, a
# call must get the failure policy's answer and a WARNING, never an ERROR
# or a crash (0.1.0 left a link without a wait set behind, and the next
# call crashed the server), and calls must work again once descriptors
# are free.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

use RLRedis qw(rl_node rl_session rl_run fact fault_mark fault_done);

my $sharedir = `pg_config --sharedir`;
chomp $sharedir;
plan skip_all => 'dblink is not installed'
  unless -f "$sharedir/extension/dblink.control";

my $redis = RLRedis->new(name => 'r016');
# A small descriptor budget, so that a handful of dblink links use it up.
my $node = rl_node('c016', $redis, "max_files_per_process = 100\n");
$node->safe_psql('postgres', 'CREATE EXTENSION dblink');
my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
my $connstr = 'host=' . $node->host . ' port=' . $node->port . ' dbname=postgres';

my $s = rl_session($node);
my ($pid) = rl_run($s, 'SELECT pg_backend_pid()');

sub call
{
	my ($key) = @_;
	return rl_run($s,
		"SELECT allowed, remaining FROM rl_allow('$key', 'fixed_window', 5, '1 hour')");
}

sub status
{
	my ($out) = rl_run($s,
		"SELECT connected, fail_open, coalesce(last_error, '') FROM rl_status()");
	return split /\|/, $out, -1;
}

# Fill the budget: dblink links until one is refused.
my $links = 0;
while ($links < 200)
{
	my ($out, $err) = rl_run($s,
		"SELECT dblink_connect('l" . ($links + 1) . "', '$connstr')");
	last if $err =~ /ERROR/;
	$links++;
}
note "the backend's budget held $links dblink links";
ok($links > 2 && $links < 200, "dblink filled the descriptor budget ($links links)");

sub drop_link
{
	rl_run($s, "SELECT dblink_disconnect('l$links')");
	$links--;
}

# 1. No descriptor left: the socket cannot be opened.
my $mark = fault_mark();
{
	my ($out, $err) = call('fd0');
	is($out, 't|', 'no descriptor left: the policy answers (open: allowed, no remaining)');
	like($err, qr/WARNING:  08006: Redis server \S+ is unavailable; calls are let through/,
		'no descriptor left: a WARNING that calls are let through');
	unlike($err, qr/ERROR/, 'no descriptor left: no ERROR');
	my ($connected, $open, $last) = status();
	is($connected, 'f', 'no descriptor left: not connected');
	like($last, qr/too many open files/, 'no descriptor left: rl_status() says why');
}
fault_done('no external descriptor left for a Redis link', $mark);

# 2. One descriptor left: the socket would fit, its wait set would not.
$mark = fault_mark();
{
	drop_link();
	usleep(250_000);    # past retry_interval (200 ms)
	my ($out, $err) = call('fd1');
	is($out, 't|', 'one descriptor left: the policy answers');
	unlike($err, qr/ERROR/, 'one descriptor left: no ERROR');
	like((status())[2], qr/too many open files/, 'one descriptor left: rl_status() says why');
	usleep(250_000);
	($out, $err) = call('fd1');
	is($out, 't|', 'one descriptor left, again: the policy answers, no crash');
	is((rl_run($s, 'SELECT pg_backend_pid()'))[0], $pid, 'the same backend goes on');
}
fault_done('one external descriptor left: socket but no wait set', $mark);

# 3. Descriptors free again: the limiter works, exactly.
$mark = fault_mark();
{
	drop_link();
	usleep(250_000);
	my ($out, $err) = call('fd2');
	is($out, 't|4', 'two descriptors free: Redis answers');
	is((call('fd2'))[0], 't|3', 'and counts');
	is((status())[0], 't', 'connected');
	my $dboid = $node->safe_psql('postgres',
		'SELECT oid FROM pg_database WHERE datname = current_database()');
	is($redis->fw_used("rl:{$dboid:fd2}:fixed_window:5:3600000ms"), 2,
		'Redis holds exactly the two calls it answered');
}
fault_done('descriptors freed: the limiter recovers', $mark);

is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $started,
	'the server never restarted');
unlike(slurp_file($node->logfile), qr/terminated by signal/,
	'no backend died of a signal');

$s->quit;
done_testing();
