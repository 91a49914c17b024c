#!/bin/bash
#
# test/lib/debian.sh
#
# What .ci/run and test/platforms.sh need to know about this machine's
# Debian: the mirror its apt sources name (never written into the
# project: a machine behind its own mirror keeps using it), and
# bookworm-backports, where Debian 12 has Valkey.
#
# Source it, then:
#   rl_debian_codename               this machine's release (bookworm, ...)
#   rl_debian_mirror                 the URI of its main archive
#   rl_debian_backports              add <codename>-backports (as root) if
#                                    no apt source names it yet
#   $RL_PLATFORM_SUITES              what runs on every platform and server
#                                    but Debian 12 with Redis 7.0 (an
#                                    RL_ONLY list, test/README.md)

# The pg_regress suites, both passes, and the TAP suites of connection
# handling, scripts, faults, the local engine, upgrades and triggers, and
# those that start a Cluster or Sentinels and that check the server's
# name.  Debian 12 with Redis 7.0 runs every suite.
RL_PLATFORM_SUITES="pg_regress regress_cluster 001_concurrency 002_stall
	003_restart 004_redis_errors 009_upgrade 013_blackhole 017_late_read
	018_cluster 022_scripts 023_local_diff 024_local 025_sentinel
	027_functions 035_policies 036_ping 037_refunds 038_concurrency
	040_servers"
RL_PLATFORM_SUITES=$(echo $RL_PLATFORM_SUITES)

rl_debian_codename() {
	(. /etc/os-release && echo "${VERSION_CODENAME:-}")
}

# The archive the sources use for the release itself (not -security, not
# -updates): deb822 stanzas (*.sources) first, then one-line entries.
rl_debian_mirror() {
	local codename uri
	codename=$(rl_debian_codename)
	uri=$(awk -v suite="$codename" '
		/^[[:space:]]*$/ { if (types && uri && match_suite) { print uri; exit }
			types = uri = match_suite = ""; next }
		/^Types:/ && / deb( |$)/ { types = 1 }
		/^URIs:/ { uri = $2 }
		/^Suites:/ { for (i = 2; i <= NF; i++) if ($i == suite) match_suite = 1 }
		END { if (types && uri && match_suite) print uri }
	' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
	if [ -z "$uri" ]; then
		uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
			sed -e 's/#.*//' -e 's/\[[^]]*\]//' |
			awk -v suite="$codename" '$1 == "deb" && $3 == suite { print $2; exit }')
	fi
	[ -n "$uri" ] || {
		echo "no apt source names the $codename archive" >&2
		return 1
	}
	echo "$uri"
}

# Debian 12's Valkey is in bookworm-backports, which a machine may not
# have among its sources: add it beside the main archive, on the same
# mirror.  Packages come from it only when asked for (-t).
rl_debian_backports() {
	local codename mirror
	codename=$(rl_debian_codename)
	if grep -rqs -- "$codename-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
		return 0
	fi
	mirror=$(rl_debian_mirror) || return 1
	cat >/etc/apt/sources.list.d/ratelimit-backports.sources <<-EOF
	Types: deb
	URIs: $mirror
	Suites: $codename-backports
	Components: main
	Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
	EOF
}
