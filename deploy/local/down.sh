#!/usr/bin/env bash
# Stop every process deploy/local/up.sh started in DIR: the app first (each
# replica's supervisor, then what is left of its process group), then
# HAProxy, the Patronis (each stops its PostgreSQL), etcd — SIGTERM to each
# process group, SIGKILL to what is left after a few seconds — and finally
# any postmaster a killed Patroni left behind. --purge also removes DIR.
#
# --kill skips the polite step (SIGKILL at once): for throwaway clusters,
# as the e2e tests' cleanup uses it.
#
# Usage: deploy/local/down.sh [--dir DIR] [--purge] [--kill]
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
dir="$repo/.fencelab/local-cluster"
purge=0
grace=8
while [ $# -gt 0 ]; do
  case "$1" in
    --dir) dir=$2; shift ;;
    --purge) purge=1 ;;
    --kill) grace=0 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "down: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

# up.sh moves the default directory to /var/tmp when the postgres user
# cannot reach the repository; it leaves a pointer behind.
if [ "$dir" = "$repo/.fencelab/local-cluster" ] && [ ! -f "$dir/pids" ] && [ -f "$repo/.fencelab/local-cluster.dir" ]; then
  dir=$(cat "$repo/.fencelab/local-cluster.dir")
fi

alive() { kill -0 -- "-$1" 2>/dev/null; }

# stop_groups PGID...: TERM, wait up to $grace seconds, KILL.
stop_groups() {
  local g
  if [ "$grace" = 0 ]; then
    for g in "$@"; do kill -KILL -- "-$g" 2>/dev/null; done
    return 0
  fi
  for g in "$@"; do kill -TERM -- "-$g" 2>/dev/null; done
  local deadline=$((SECONDS + grace))
  while [ $SECONDS -lt $deadline ]; do
    local left=0
    for g in "$@"; do alive "$g" && left=1; done
    [ $left = 0 ] && return 0
    sleep 0.1
  done
  for g in "$@"; do kill -KILL -- "-$g" 2>/dev/null; done
}

if [ -f "$dir/pids" ]; then
  declare -A group=()
  while read -r name pgid; do group[$name]=$pgid; done <"$dir/pids"
  tier() {
    local gs=() n
    for n in "$@"; do [ -n "${group[$n]:-}" ] && gs+=("${group[$n]}"); done
    [ ${#gs[@]} -gt 0 ] && stop_groups "${gs[@]}"
  }
  # The supervisors first (deploy/local/supervise.sh): each stops its
  # replica (SIGTERM, the replica's graceful shutdown) and exits without
  # restarting it. Only then the process groups, for whatever is left: a
  # replica signalled while its supervisor still ran would be restarted.
  sups=()
  for n in serve0 serve1 serve2 worker0 worker1; do
    f="$dir/run/$n.supervisor.pid"
    [ -f "$f" ] && sups+=("$(cat "$f")")
  done
  if [ ${#sups[@]} -gt 0 ]; then
    if [ "$grace" = 0 ]; then
      kill -KILL "${sups[@]}" 2>/dev/null
    else
      kill -TERM "${sups[@]}" 2>/dev/null
      deadline=$((SECONDS + grace))
      while [ $SECONDS -lt $deadline ]; do
        left=0
        for p in "${sups[@]}"; do kill -0 "$p" 2>/dev/null && left=1; done
        [ $left = 0 ] && break
        sleep 0.1
      done
    fi
  fi
  tier serve0 serve1 serve2 worker0 worker1
  tier haproxy
  tier patroni0 patroni1
  tier etcd reaper
  rm -f "$dir/pids"
  rm -rf "$dir/run"
fi

# A Patroni killed with SIGKILL cannot stop its PostgreSQL: stop any
# postmaster still running on a data directory of this cluster.
for pidfile in "$dir"/pg/node*/data/postmaster.pid; do
  [ -f "$pidfile" ] || continue
  pid=$(head -1 "$pidfile")
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    if [ "$grace" = 0 ]; then pkill -KILL -P "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; continue; fi
    kill -QUIT "$pid" 2>/dev/null # immediate shutdown
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
  fi
done

if [ "$purge" = 1 ]; then
  rm -rf "$dir"
  if [ -f "$repo/.fencelab/local-cluster.dir" ] && [ "$(cat "$repo/.fencelab/local-cluster.dir")" = "$dir" ]; then
    rm -f "$repo/.fencelab/local-cluster.dir"
  fi
fi
echo "fencelab local cluster in $dir stopped"
