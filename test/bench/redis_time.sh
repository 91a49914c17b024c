#!/bin/bash
#
# test/bench/redis_time.sh
#
# Redis time per check: INFO commandstats usec_per_call of each script,
# on one Redis, one case after another, beside minimal scripts of the same
# algorithms (test/bench/minimal: the floor, with the same arguments and
# reply, none of the exactness machinery).  Hot key; "admitted" is a limit
# no call reaches, "denied" a limit of 1 after one admitted call.  Also the
# layered script (two rules), a 1000-key batch (rl_allow_many sends one
# script per key: per key) and the statement trigger's script (64 keys per
# run, as RL_STATEMENT_CHUNK: per key).  Each case is the median of
# RL_RT_ROUNDS rounds (3) of RL_RT_CALLS calls (20000).
#
#   bash test/bench/redis_time.sh PORT [RESULTS.tsv]
#
# run.sh calls it (section 10); RL_BENCH_ONLY=redis_time bash test/bench/run.sh
# runs only this section against a Redis of its own.
# RL_RT_ALGOS="gcra sliding_log" measures only those algorithms (and still
# the layered, batch and statement cases).
# RL_RT_OLD=DIR also measures the scripts in DIR (a lua/ of another
# version, e.g. from git archive) for comparison.

set -u
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PORT=$1
OUT=${2:-/dev/null}
CALLS=${RL_RT_CALLS:-20000}
ROUNDS=${RL_RT_ROUNDS:-3}
ALGOS=${RL_RT_ALGOS:-"fixed_window sliding_log sliding_counter token_bucket leaky_bucket gcra"}
# limit, window (us), cost, pinned clock (0: Redis TIME)
ADMIT="1000000000 3600000000 1 0"
DENY="1 3600000000 1 0"
declare -A V R

rc() { redis-cli -p "$PORT" "$@"; }

# load FILE: the script's SHA1 once Redis has it.
load() { rc -x SCRIPT LOAD < "$1"; }

# usec CMD: usec_per_call of command CMD since the last CONFIG RESETSTAT.
usec() {
	rc INFO commandstats | tr -d '\r' |
		awk -F'[=,]' -v c="cmdstat_$1:" 'index($0, c) == 1 { print $6 }'
}

# run NAME DIVISOR SETUP -- COMMAND...: one round of a case.  SETUP (a
# shell command) runs after the keys are deleted and before the stats are
# reset; the value is usec_per_call of the command / DIVISOR.
run() {
	local name=$1 div=$2 setup=$3
	shift 4
	rc DEL hot >/dev/null
	rc EVAL "for _, k in ipairs(redis.call('KEYS', 'rl:*')) do redis.call('DEL', k) end" 0 >/dev/null
	eval "$setup"
	rc CONFIG RESETSTAT >/dev/null
	redis-benchmark -p "$PORT" -n "$CALLS" -c 1 -P 16 -q ${RB_OPTS:-} "$@" >/dev/null
	V[$name]+="$(awk -v u="$(usec "$(echo "$1" | tr 'A-Z' 'a-z')")" -v d="$div" \
		'BEGIN { printf "%.2f", u / d }') "
}

median() {
	tr ' ' '\n' | grep . | sort -n |
		awk '{ v[NR] = $1 } END { printf "%.2f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
declare -A SHA
for a in $ALGOS; do
	SHA[min-$a]=$(load "$HERE/minimal/$a.lua")
	sh "$ROOT/src/gen_scripts.sh" "$ROOT/lua" "$a" > "$W/$a.lua"
	SHA[rl-$a]=$(load "$W/$a.lua")
	if [ -n "${RL_RT_OLD:-}" ]; then
		sh "$ROOT/src/gen_scripts.sh" "$RL_RT_OLD" "$a" > "$W/old-$a.lua"
		# 0.2.0's main part reads KEYS and ARGV itself.
		grep -q 'rl_allow(algorithm)' "$RL_RT_OLD/allow.lua" &&
			sed -i "s/^return rl_allow(KEYS, ARGV, $a)\$/return rl_allow($a)/" "$W/old-$a.lua"
		SHA[old-$a]=$(load "$W/old-$a.lua")
	fi
done
sh "$ROOT/src/gen_scripts.sh" "$ROOT/lua" layered > "$W/layered.lua"
SHA[rl-layered]=$(load "$W/layered.lua")
MULTI=rl
if [ -n "${RL_RT_OLD:-}" ]; then
	sh "$ROOT/src/gen_scripts.sh" "$RL_RT_OLD" layered |
		sed 's/^return rl_layered(KEYS, ARGV)$/return rl_layered()/' > "$W/old-layered.lua"
	SHA[old-layered]=$(load "$W/old-layered.lua")
	MULTI="old rl"
fi
VERSIONS="min rl"
[ -n "${RL_RT_OLD:-}" ] && VERSIONS="min old rl"
# The same scripts as a Redis Functions library, called by FCALL.
if [ "${RL_RT_FCALL:-1}" = 1 ]; then
	sh "$ROOT/src/gen_scripts.sh" "$ROOT/lua" library > "$W/library.lua"
	lib=$(rc -x FUNCTION LOAD REPLACE < "$W/library.lua")
	case $lib in ratelimit_*) ;; *) echo "FUNCTION LOAD: $lib" >&2; exit 1 ;; esac
	fn=rl_${lib#ratelimit_}
	VERSIONS="$VERSIONS fn"
	MULTI="$MULTI fn"
fi

stmt_keys=()
stmt_costs=()
for i in $(seq 64); do
	stmt_keys+=("rl:{s}:k$i")
	stmt_costs+=(1)
done

for _ in $(seq "$ROUNDS"); do
	for a in $ALGOS; do
		for v in $VERSIONS; do
			cmd=(EVALSHA "${SHA[$v-$a]:-}")
			[ $v = fn ] && cmd=(FCALL "${fn}_$a")
			run "$v $a admitted" 1 : -- "${cmd[@]}" 1 hot $ADMIT
			run "$v $a denied" 1 "rc ${cmd[*]} 1 hot $DENY >/dev/null" -- \
				"${cmd[@]}" 1 hot $DENY
		done
	done
	for v in $MULTI; do
		lcmd=(EVALSHA "${SHA[$v-layered]:-}")
		bcmd=(EVALSHA "${SHA[$v-token_bucket]:-}")
		[ $v = fn ] && lcmd=(FCALL "${fn}_layered") bcmd=(FCALL "${fn}_token_bucket")
		# 0.3.0's layered script takes a burst per rule (and one for a
		# statement's rules, after the window); 0.2.0's does not.
		lb=1000000000 ub=(1000000000)
		[ $v = old ] && lb= ub=()
		run "$v layered 2 rules admitted" 1 : -- "${lcmd[@]}" 2 \
			'rl:{l}:token_bucket' 'rl:{l}:fixed_window' 0 \
			token_bucket 1000000000 3600000000 1 $lb fixed_window 1000000000 3600000000 1 $lb
		RB_OPTS="-r 1000" run "$v batch 1000 keys token_bucket per key" 1 : -- \
			"${bcmd[@]}" 1 'rl:{__rand_int__}:token_bucket' $ADMIT
		run "$v statement trigger 64 keys per key" 64 : -- "${lcmd[@]}" 64 \
			"${stmt_keys[@]}" 0 = token_bucket 1000000000 3600000000 "${ub[@]}" "${stmt_costs[@]}"
	done
done

printf '  %-16s' algorithm
for v in $VERSIONS; do
	printf ' %9s %9s' "$v adm" "$v den"
done
printf ' %7s %7s\n' "x adm" "x den"
best=rl
[ "${RL_RT_FCALL:-1}" = 1 ] && best=fn
for a in $ALGOS; do
	printf '  %-16s' "$a"
	for v in $VERSIONS; do
		for o in admitted denied; do
			R[$v $a $o]=$(echo "${V[$v $a $o]}" | median)
			printf 'redis us per check %s %s %s\t%s\tus\n' "$v" "$a" "$o" "${R[$v $a $o]}" >> "$OUT"
			printf ' %9s' "${R[$v $a $o]}"
		done
	done
	xa=$(awk -v n="${R[$best $a admitted]}" -v d="${R[min $a admitted]}" 'BEGIN { printf "%.2f", n / d }')
	xd=$(awk -v n="${R[$best $a denied]}" -v d="${R[min $a denied]}" 'BEGIN { printf "%.2f", n / d }')
	printf ' %7s %7s\n' "$xa" "$xd"
	for o in admitted denied; do
		x=$xa
		[ $o = denied ] && x=$xd
		v=$(awk -v x="$x" 'BEGIN { print (x <= 1.1) ? "met" : "MISSED" }')
		printf 'ratio redis time %s %s / minimal\t%s\t%s\n' "$a" "$o" "$x" "$v" >> "$OUT"
	done
done
for c in "layered 2 rules admitted" "batch 1000 keys token_bucket per key" \
	"statement trigger 64 keys per key"; do
	printf '  %-44s' "$c"
	for v in $MULTI; do
		m=$(echo "${V[$v $c]}" | median)
		printf ' %s %7s us' "$v" "$m"
		printf 'redis us per check %s %s\t%s\tus\n' "$v" "$c" "$m" >> "$OUT"
	done
	echo
done
