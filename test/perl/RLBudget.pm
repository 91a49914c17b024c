# test/perl/RLBudget.pm
#
# A TAP suite's time budget, ended cleanly.  test/check.sh runs each
# suite under timeout(1) --foreground, which sends TERM to the suite's
# perl alone once the budget is spent, and loads this module into it
# (PERL5OPT=-MRLBudget).  The TERM becomes a failed test point naming
# the suite and its budget, then an exit that runs the END blocks, so the
# suite's PostgreSQL and Redis servers are stopped and the next suite
# starts on a clean machine.  Without it the perl would die of the signal
# and leave its servers running.
#
# Only the suite's own process reacts: every perl started with PERL5OPT
# loads this module, but the handler is installed in the first one (its
# pid is kept in RL_BUDGET_PID, and a suite that re-executes itself, as
# RLNetns does, keeps its pid), and a process forked from it takes the
# signal's default action as before.

package RLBudget;

use strict;
use warnings;

sub import
{
	$ENV{RL_BUDGET_PID} //= $$;
	return unless $ENV{RL_BUDGET_PID} == $$;
	$SIG{TERM} = \&over_budget;
	return;
}

# Why: a suite that outlives its budget is one failure, not a wedged run;
# the END blocks it reaches by exit() stop its servers.
sub over_budget
{
	if ($$ != $ENV{RL_BUDGET_PID})
	{
		$SIG{TERM} = 'DEFAULT';
		kill 'TERM', $$;
		return;
	}
	$SIG{TERM} = 'DEFAULT';
	require Test::More;
	Test::More::fail("$0 ended by test/check.sh: it outlived its budget of "
		  . ($ENV{RL_TAP_BUDGET} // '?') . ' s');
	exit 1;
}

1;
