#!/usr/bin/env bash
# real-controller.sh: the agents scenario on a real `muster controller`
# process, as a user runs it (issue "agents at scale", second Done-when
# line). It builds muster, starts a controller on loopback in a temporary
# data dir (default model, embedded SQLite), adds N machines with one
# `muster add-machine -n N`, and reads `muster status --format json` every
# 0.5 s while they converge. It prints one line of figures:
#
#   fleet=embedded|served agents=true|false seconds=… worst_status=…
#   status_failures=… peak_rss_mb=… cpu_seconds=… restarts=… emfile=…
#   warn_error_lines=…
#
# seconds is from the add to every machine started (agents on) or every
# instance running (AGENTS=false), polled on the controller's
# muster_machines metric every 0.1 s. Settings (environment):
#   N=10000        machines
#   AGENTS=true    false sets sim-agents=false on the model first
#   BUSY=false     true keeps one core busy with another process meanwhile
#   PORT=27070     API port on 127.0.0.1 (METRICS_PORT=PORT+1)
#   WATCH=true     false: no status reads while the machines converge
#   AFTER=0        once converged, time this many more status reads
#                  one after the other (after_status=… in seconds)
#   FLEET=embedded served: the default model's cloud is a `muster sim
#                  serve` in a process of its own (SIM_PORT=PORT+2),
#                  whose agents each hold their own TLS connection to the
#                  controller, as a real fleet's do (embedded: the
#                  controller's in-process agents share a few); also
#                  prints the controller's peak open connections
#                  (peak_fds=…) and the sim's peak RSS and CPU
# Requires: go, curl, awk. Linux (/proc for the peak RSS).
set -euo pipefail

N=${N:-10000}
AGENTS=${AGENTS:-true}
BUSY=${BUSY:-false}
PORT=${PORT:-27070}
METRICS_PORT=${METRICS_PORT:-$((PORT + 1))}
TIMEOUT=${TIMEOUT:-300}
AFTER=${AFTER:-0}
WATCH=${WATCH:-true}
FLEET=${FLEET:-embedded}
SIM_PORT=${SIM_PORT:-$((PORT + 2))}
case "$FLEET" in embedded | served) ;; *) echo "real-controller: bad FLEET=$FLEET: want embedded or served" >&2; exit 2 ;; esac

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
ctrl_pid= busy_pid= sim_pid=
cleanup() {
	[ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null || true
	if [ -n "$sim_pid" ]; then
		kill "$sim_pid" 2>/dev/null || true
		wait "$sim_pid" 2>/dev/null || true
	fi
	if [ -n "$ctrl_pid" ]; then
		kill "$ctrl_pid" 2>/dev/null || true
		wait "$ctrl_pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

(cd "$root" && go build -o "$work/muster" ./cmd/muster)
m() { "$work/muster" --config "$work/data/client.yaml" "$@"; }
now() { date +%s.%N; }

sim_args=()
if [ "$FLEET" = served ]; then
	"$work/muster" sim serve --listen "127.0.0.1:$SIM_PORT" --sim-agents="$AGENTS" >"$work/sim.log" 2>&1 &
	sim_pid=$!
	for _ in $(seq 100); do
		if curl -sf "http://127.0.0.1:$SIM_PORT/v1/info" >/dev/null; then break; fi
		sleep 0.1
	done
	sim_args=(--default-sim-endpoint "http://127.0.0.1:$SIM_PORT")
fi
"$work/muster" controller --data-dir "$work/data" --listen "127.0.0.1:$PORT" \
	--metrics-listen "127.0.0.1:$METRICS_PORT" "${sim_args[@]}" >"$work/controller.log" 2>&1 &
ctrl_pid=$!
for _ in $(seq 300); do
	if [ -f "$work/data/client.yaml" ] && m models >/dev/null 2>&1; then break; fi
	kill -0 "$ctrl_pid" 2>/dev/null || { cat "$work/controller.log" >&2; echo "real-controller: the controller exited" >&2; exit 1; }
	sleep 0.1
done
m models >/dev/null || { echo "real-controller: the controller did not answer" >&2; exit 1; }
if [ "$AGENTS" = false ] && [ "$FLEET" = embedded ]; then
	m model-config sim-agents=false >/dev/null
fi
if [ "$BUSY" = true ]; then
	taskset -c 0 sh -c 'while :; do :; done' &
	busy_pid=$!
fi

# count LABEL VALUE: the machines whose muster_machines label is value.
count() {
	curl -sf "http://127.0.0.1:$METRICS_PORT/metrics" |
		awk -v want="$1=\"$2\"" '/^muster_machines\{/ && index($0, want) { s += $NF } END { printf "%d\n", s }'
}
label=status value=started
if [ "$AGENTS" = false ]; then label=instance_status value=running; fi

# The status reader: every 0.5 s, its duration or FAIL, until told to stop.
(
	while [ "$WATCH" = true ] && [ ! -f "$work/stop" ]; do
		t0=$(now)
		if m status --format json >/dev/null 2>>"$work/status.err"; then
			echo "$(now) $t0" | awk '{ printf "%.3f\n", $1 - $2 }'
		else
			echo FAIL
		fi
		sleep 0.5
	done
) >"$work/status.times" &
reader=$!

start=$(now)
m add-machine -n "$N" >/dev/null
peak_fds=0
while :; do
	k=$(count "$label" "$value")
	fds=$(ls "/proc/$ctrl_pid/fd" | wc -l)
	if [ "$fds" -gt "$peak_fds" ]; then peak_fds=$fds; fi
	if [ "${k:-0}" -ge "$N" ]; then break; fi
	if awk -v s="$start" -v n="$(now)" -v t="$TIMEOUT" 'BEGIN { exit !(n - s > t) }'; then
		echo "real-controller: not converged after ${TIMEOUT}s: $k of $N" >&2
		exit 1
	fi
	sleep 0.1
done
seconds=$(awk -v s="$start" -v n="$(now)" 'BEGIN { printf "%.2f", n - s }')
touch "$work/stop"
wait "$reader"

after=
for _ in $(seq "$AFTER"); do
	t0=$(now)
	m status --format json >/dev/null
	after="$after$(echo "$(now) $t0" | awk '{ printf "%.3f", $1 - $2 }'),"
done

rss=$(awk '/^VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$ctrl_pid/status")
cpu=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$ctrl_pid/stat")
worst=$( (grep -v FAIL "$work/status.times" || true) | sort -n | tail -1)
failures=$(grep -c FAIL "$work/status.times" || true)
restarts=$(grep -c -e 'provisioner failed; restarting' -e 'provisioner stopped.*why=' "$work/controller.log" || true)
emfile=$(grep -c 'too many open files' "$work/controller.log" || true)
noisy=$(grep -c -e 'level=WARN' -e 'level=ERROR' "$work/controller.log" || true)
served=
if [ "$FLEET" = served ]; then
	served=" peak_fds=$peak_fds sim_peak_rss_mb=$(awk '/^VmHWM/ { printf "%.0f", $2 / 1024 }' "/proc/$sim_pid/status") sim_cpu_seconds=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$sim_pid/stat")"
fi
echo "fleet=$FLEET agents=$AGENTS busy=$BUSY machines=$N seconds=$seconds worst_status=${worst:-none} status_failures=$failures peak_rss_mb=$rss cpu_seconds=$cpu restarts=$restarts emfile=$emfile warn_error_lines=$noisy$served${after:+ after_status=${after%,}}"
