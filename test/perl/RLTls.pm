# test/perl/RLTls.pm
#
# Certificates for the TLS suites (026, 028), made with the openssl
# command in a directory of the suite's: a CA, and certificates it signs
# with the extensions a test asks for (a server's names, a client's key
# usage) and a validity in days (-1: valid until a day before it was
# made, so expired).  Keys are P-256 and mode 0600, as Redis wants them.
#
#   rl_tls_ca($dir, $name)                      $dir/$name.{crt,key}
#   rl_tls_cert($dir, $name, $ca, $days, $ext)  $dir/$name.{crt,key}

package RLTls;

use strict;
use warnings;

use Exporter 'import';
use IPC::Run;

our @EXPORT_OK = qw(rl_tls_ca rl_tls_cert);

# Runs openssl with the arguments; dies with its message when it fails.
sub openssl
{
	my @cmd = ('openssl', @_);
	my ($out, $err) = ('', '');
	IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err)
	  or die "openssl @_: $err";
	return;
}

# A self-signed CA, valid for two days.
sub rl_tls_ca
{
	my ($dir, $name) = @_;
	openssl('req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1',
		'-nodes', '-keyout', "$dir/$name.key", '-out', "$dir/$name.crt",
		'-days', '2', '-subj', "/CN=ratelimit test $name");
	return;
}

# A certificate signed by $ca, with the extension lines $ext, valid for
# $days days (OpenSSL 3.0 has no -not_before/-not_after: -1 makes one
# that has expired).
sub rl_tls_cert
{
	my ($dir, $name, $ca, $days, $ext) = @_;
	open my $fh, '>', "$dir/$name.ext" or die "$dir/$name.ext: $!";
	print $fh "$ext\n";
	close $fh;
	openssl('req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
		'-keyout', "$dir/$name.key", '-out', "$dir/$name.csr",
		'-subj', "/CN=ratelimit test $name");
	openssl('x509', '-req', '-in', "$dir/$name.csr", '-CA', "$dir/$ca.crt",
		'-CAkey', "$dir/$ca.key", '-CAcreateserial', '-days', $days,
		'-out', "$dir/$name.crt", '-extfile', "$dir/$name.ext");
	chmod 0600, "$dir/$name.key";
	return;
}

1;
