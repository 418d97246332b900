#!/usr/bin/env bash
# Keep one replica running: deploy/local/up.sh starts each `fencelab serve`
# and `fencelab worker` under this script. A replica that exits for any
# reason (kill -9, a crash, an OOM kill) is started again after a backoff
# that doubles from 1 s to 30 s while it keeps failing and goes back to 1 s
# once it has run for 30 s; every exit and restart is one line in
# DIR/log/supervisor.log (and in the replica's own log). SIGTERM or SIGINT
# stops the replica (SIGTERM, its own graceful shutdown) and then this
# script, without a restart: down.sh signals the supervisor first.
#
# The replica's pid is in DIR/run/NAME.pid, the supervisor's in
# DIR/run/NAME.supervisor.pid.
#
# Usage: deploy/local/supervise.sh NAME DIR -- CMD [ARGS...]
set -u
name=$1 dir=$2
shift 2
[ "${1:-}" = -- ] && shift
mkdir -p "$dir/run" "$dir/log"
echo $$ >"$dir/run/$name.supervisor.pid"

log() {
  local line
  line="$(date -u +%Y-%m-%dT%H:%M:%S.%3NZ) supervise: $name: $*"
  echo "$line" >&2
  echo "$line" >>"$dir/log/supervisor.log"
}

stopping=0 child=
stop() {
  stopping=1
  if [ -n "$child" ]; then kill -TERM "$child" 2>/dev/null; fi
}
trap stop TERM INT

backoff=1 restarts=0
while :; do
  started=$SECONDS
  "$@" &
  child=$!
  # Written whole, then renamed: a reader never sees a half-written file.
  echo "$child" >"$dir/run/$name.pid.tmp" && mv -f "$dir/run/$name.pid.tmp" "$dir/run/$name.pid"
  if [ "$restarts" -gt 0 ]; then log "restart #$restarts: pid $child"; fi
  # wait returns early when a trapped signal arrives: wait again until the
  # replica itself has exited, so its status is the real one.
  wait "$child"
  rc=$?
  while kill -0 "$child" 2>/dev/null; do
    wait "$child"
    rc=$?
  done
  if [ "$stopping" = 1 ]; then
    log "stopped (pid $child, status $rc)"
    exit 0
  fi
  ran=$((SECONDS - started))
  if [ "$ran" -ge 30 ]; then backoff=1; fi
  restarts=$((restarts + 1))
  log "pid $child exited with status $rc after ${ran}s; restart #$restarts in ${backoff}s"
  sleep "$backoff" &
  wait $! # a SIGTERM during the backoff ends it at once
  if [ "$stopping" = 1 ]; then
    log "stopped during the backoff"
    exit 0
  fi
  backoff=$((backoff * 2))
  if [ "$backoff" -gt 30 ]; then backoff=30; fi
done
