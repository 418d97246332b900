#!/usr/bin/env bash
# Bring up, on loopback only, the production topology of docs/DEPLOY.md:
#
#   etcd (Patroni's consensus store)
#   2 × PostgreSQL 15, each managed by a Patroni (one primary, one standby)
#   HAProxy: :DB → the current primary (Patroni REST GET /primary),
#            :HTTP → 3 × `fencelab serve` (GET /healthz)
#   3 × fencelab serve, 2 × fencelab worker, one shared blob directory,
#   each replica under deploy/local/supervise.sh (restarted with backoff)
#
# Every process runs under `timeout` (--lifetime) in its own process group
# and stops by itself; deploy/local/down.sh --dir DIR stops them all sooner.
# The process groups are listed in DIR/pids, the addresses in DIR/env
# (sh-quoted: set -a; . DIR/env; set +a).
#
# Usage: deploy/local/up.sh [--sync|--async] [--dir DIR] [--base-port N]
#                           [--lifetime DUR] [--bin PATH] [--db-route haproxy|multihost]
#                           [--no-install] [--no-app]
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
mode=sync
dir="$repo/.fencelab/local-cluster"
base=19100
lifetime=30m
bin=""
route=haproxy
install=1
app=1
while [ $# -gt 0 ]; do
  case "$1" in
    --sync) mode=sync ;;
    --async) mode=async ;;
    --dir) dir=$2; shift ;;
    --base-port) base=$2; shift ;;
    --lifetime) lifetime=$2; shift ;;
    --bin) bin=$2; shift ;;
    --db-route) route=$2; shift ;;
    --no-install) install=0 ;;
    --no-app) app=0 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "up: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$route" in haproxy|multihost) ;; *) echo "up: --db-route must be haproxy or multihost" >&2; exit 2 ;; esac
# The lifetime in seconds: the app stops first, then HAProxy, then the
# Patronis (each stops its PostgreSQL and, with etcd still up, gives up its
# leader key cleanly), etcd last.
if ! [[ "$lifetime" =~ ^([0-9]+)([smhd]?)$ ]]; then
  echo "up: --lifetime must be a number with an optional unit s, m, h or d (e.g. 30m)" >&2; exit 2
fi
life=${BASH_REMATCH[1]}
case "${BASH_REMATCH[2]}" in
  m) life=$((life * 60)) ;;
  h) life=$((life * 3600)) ;;
  d) life=$((life * 86400)) ;;
esac
if ! [[ "$base" =~ ^[0-9]+$ ]] || [ "$base" -lt 1024 ] || [ "$base" -gt 65480 ]; then
  echo "up: --base-port must be in 1024..65480" >&2; exit 2
fi

pgbin=/usr/lib/postgresql/15/bin
missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v patroni >/dev/null 2>&1 || missing+=(patroni python3-etcd)
command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
[ -x "$pgbin/postgres" ] || missing+=(postgresql-15)
command -v curl >/dev/null 2>&1 || missing+=(curl)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$install" = 0 ] || [ "$(id -u)" != 0 ]; then
    echo "up: missing Debian packages: ${missing[*]} (apt-get install -y ${missing[*]})" >&2
    exit 3
  fi
  echo "up: installing ${missing[*]} with apt" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  # The packages' own services must not run: this script owns its processes.
  for s in etcd haproxy; do
    if command -v systemctl >/dev/null 2>&1; then systemctl stop "$s" >/dev/null 2>&1 || true; fi
  done
fi

# Ports: etcd client/peer, PostgreSQL, Patroni REST, HAProxy, serve replicas.
p_etcd=$base p_etcd_peer=$((base + 1))
p_pg0=$((base + 10)) p_pg1=$((base + 11))
p_api0=$((base + 20)) p_api1=$((base + 21))
p_db=$((base + 30)) p_http=$((base + 31)) p_stats=$((base + 32))
p_serve=($((base + 40)) $((base + 41)) $((base + 42)))

default_dir="$repo/.fencelab/local-cluster"
asdb=()
if [ "$(id -u)" = 0 ]; then
  # setpriv execs Patroni as postgres in place; runuser would stay as its
  # parent and SIGKILL it 2 s after a SIGTERM, mid-shutdown.
  asdb=(setpriv --reuid=postgres --regid=postgres --init-groups env HOME=/var/lib/postgresql USER=postgres)
fi
# PostgreSQL refuses to run as root: Patroni (and so postgres) runs as the
# postgres user, in data directories it owns under a 0755 parent that every
# directory above must let it traverse. A clone under /root cannot be
# traversed: the default directory then moves to /var/tmp (down.sh finds it
# through .fencelab/local-cluster.dir).
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ ${#asdb[@]} -gt 0 ] && ! "${asdb[@]}" test -x "$dir/.." 2>/dev/null; then
  if [ "$dir" != "$default_dir" ]; then
    echo "up: the postgres user cannot reach $dir (a parent directory is not world-traversable); choose another --dir" >&2
    exit 2
  fi
  rmdir "$dir" 2>/dev/null || true
  dir=/var/tmp/fencelab-local-$base
  mkdir -p "$dir" "$repo/.fencelab"
  echo "$dir" >"$repo/.fencelab/local-cluster.dir"
  echo "up: $repo is not reachable by the postgres user; the cluster lives in $dir" >&2
fi
# Patroni's spawned postmaster chdirs back to the working directory it
# inherited: start everything from inside the cluster's directory.
if [ -n "$bin" ]; then bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin"); fi
cd "$dir"
if [ -f "$dir/pids" ]; then
  echo "up: $dir/pids exists: run deploy/local/down.sh --dir $dir first" >&2
  exit 2
fi
# Build the app before anything starts, so a failed build leaves nothing
# running.
if [ "$app" = 1 ] && [ -z "$bin" ]; then
  echo "up: building fencelab" >&2
  bin="$dir/fencelab"
  (cd "$repo" && go build -o "$bin" ./cmd/fencelab)
fi
chmod 0755 "$dir"
mkdir -p "$dir/etcd" "$dir/pg" "$dir/log" "$dir/app"
chmod 0755 "$dir/pg" "$dir/log"
if [ ${#asdb[@]} -gt 0 ]; then chown postgres:postgres "$dir/pg"; fi
: >"$dir/pids"

# start NAME CMD...: one process group bounded by timeout(1) (SIGTERM at
# its lifetime, SIGKILL 10 s later), logged to log/NAME.log, its group id
# recorded for down.sh.
start() {
  local name=$1; shift
  local secs=$life
  case "$name" in
    haproxy) secs=$((life + 5)) ;;
    patroni*) secs=$((life + 10)) ;;
    etcd) secs=$((life + 25)) ;;
  esac
  setsid timeout --kill-after=10s "${secs}s" "$@" >"$dir/log/$name.log" 2>&1 </dev/null &
  echo "$name $!" >>"$dir/pids"
}

# phase NAME: one progress line on stderr with the seconds since the start.
phase() { echo "up: [${SECONDS}s] $*" >&2; }

# wait_for WHAT SECONDS CMD...: poll CMD until it succeeds.
wait_for() {
  local what=$1 secs=$2; shift 2
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      echo "up: timed out after ${secs}s waiting for $what (logs in $dir/log)" >&2
      "$repo/deploy/local/down.sh" --dir "$dir" >&2 || true
      exit 1
    fi
    sleep 0.2
  done
}

phase "starting etcd"
# --- etcd: one member, loopback only ---------------------------------------
start etcd etcd --name etcd0 --data-dir "$dir/etcd" \
  --listen-client-urls "http://127.0.0.1:$p_etcd" --advertise-client-urls "http://127.0.0.1:$p_etcd" \
  --listen-peer-urls "http://127.0.0.1:$p_etcd_peer" --initial-advertise-peer-urls "http://127.0.0.1:$p_etcd_peer" \
  --initial-cluster "etcd0=http://127.0.0.1:$p_etcd_peer" --initial-cluster-state new \
  --listen-metrics-urls "" --log-level warn --logger zap
wait_for etcd 20 curl -sf "http://127.0.0.1:$p_etcd/health"

# --- Patroni + PostgreSQL ----------------------------------------------------
secret=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
if [ "$mode" = sync ]; then syncmode=true; else syncmode=false; fi
for i in 0 1; do
  pgport=$((base + 10 + i)) apiport=$((base + 20 + i))
  cat >"$dir/pg/node$i.yml" <<EOF
# Patroni node$i ($mode replication). Settings explained in docs/DEPLOY.md.
scope: fencelab-$base
name: node$i
log:
  level: WARNING
restapi:
  listen: 127.0.0.1:$apiport
  connect_address: 127.0.0.1:$apiport
etcd3:
  hosts: 127.0.0.1:$p_etcd
bootstrap:
  dcs:
    ttl: 20
    loop_wait: 1
    retry_timeout: 5
    maximum_lag_on_failover: 1048576
    primary_start_timeout: 0
    synchronous_mode: $syncmode
    synchronous_mode_strict: false
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        synchronous_commit: "on"
        max_connections: 100
        max_wal_senders: 5
        max_replication_slots: 5
        shared_buffers: 32MB
        wal_keep_size: 64MB
  initdb:
  - encoding: UTF8
  - data-checksums
  - no-sync
  - auth-local: trust
  - auth-host: scram-sha-256
  pg_hba:
  - local all all trust
  - host replication replicator 127.0.0.1/32 scram-sha-256
  - host all all 127.0.0.1/32 scram-sha-256
postgresql:
  listen: 127.0.0.1:$pgport
  connect_address: 127.0.0.1:$pgport
  data_dir: $dir/pg/node$i/data
  bin_dir: $pgbin
  pgpass: $dir/pg/node$i/pgpass
  authentication:
    superuser:
      username: postgres
      password: $secret
    replication:
      username: replicator
      password: $secret
    rewind:
      username: postgres
      password: $secret
  parameters:
    unix_socket_directories: $dir/pg/node$i
tags:
  nofailover: false
  noloadbalance: false
  clonefrom: false
  nosync: false
EOF
  mkdir -p "$dir/pg/node$i"
  chmod 0700 "$dir/pg/node$i"
  chmod 0600 "$dir/pg/node$i.yml"
  if [ "$(id -u)" = 0 ]; then chown -R postgres:postgres "$dir/pg/node$i" "$dir/pg/node$i.yml"; fi
done
# The reaper bounds PostgreSQL itself: Patroni stops its PostgreSQL when it
# gets SIGTERM, but a Patroni that had to be killed (stuck mid-bootstrap,
# say) leaves the postmaster running in its own session. After everything
# else's lifetime the reaper shuts down any postmaster still running on
# this cluster's data directories (SIGQUIT: immediate), then exits.
reap='for f in "$0"/pg/node*/data/postmaster.pid; do
  [ -f "$f" ] || continue; p=$(head -1 "$f"); kill -0 "$p" 2>/dev/null || continue
  kill -QUIT "$p"; sleep 5; kill -KILL "$p" 2>/dev/null
done'
setsid timeout --kill-after=10s "$((life + 45))s" bash -c "sleep $((life + 30)); $reap" "$dir" >"$dir/log/reaper.log" 2>&1 </dev/null &
echo "reaper $!" >>"$dir/pids"

phase "starting Patroni on node0 and node1"
# Both start at once: whichever takes the initialize key in etcd first runs
# initdb and becomes the primary; the other clones it (pg_basebackup).
start patroni0 "${asdb[@]}" patroni "$dir/pg/node0.yml"
start patroni1 "${asdb[@]}" patroni "$dir/pg/node1.yml"
primary_up() { curl -sf "http://127.0.0.1:$p_api0/primary" || curl -sf "http://127.0.0.1:$p_api1/primary"; }
wait_for "a primary" 90 primary_up
phase "primary up"
if curl -sf "http://127.0.0.1:$p_api0/primary" >/dev/null 2>&1; then
  primary=0 standby_api=$p_api1 primary_pg=$p_pg0
else
  primary=1 standby_api=$p_api0 primary_pg=$p_pg1
fi
# --- HAProxy -----------------------------------------------------------------
cat >"$dir/haproxy.cfg" <<EOF
# HAProxy for the local cluster. Settings explained in docs/DEPLOY.md.
global
  maxconn 400

defaults
  log global
  timeout connect 1s
  timeout check 1s
  retries 2

listen stats
  mode http
  bind 127.0.0.1:$p_stats
  timeout client 10s
  timeout server 10s
  stats enable
  stats uri /

# Writes go to whichever node Patroni's REST API calls the primary: 200 on
# GET /primary from the leader only. On a failover the old primary is
# marked down and its sessions cut (on-marked-down shutdown-sessions), so
# no client keeps writing to a demoted node.
listen postgres_primary
  mode tcp
  bind 127.0.0.1:$p_db
  timeout client 30m
  timeout server 30m
  option httpchk GET /primary
  http-check expect status 200
  default-server inter 500ms fall 2 rise 1 on-marked-down shutdown-sessions
  server node0 127.0.0.1:$p_pg0 maxconn 100 check port $p_api0
  server node1 127.0.0.1:$p_pg1 maxconn 100 check port $p_api1

# The app replicas. /healthz (the process answers), not /readyz (the
# database answers): during a failover every replica should keep answering
# 503 database_unavailable with Retry-After itself rather than be pulled.
listen fencelab_http
  mode http
  bind 127.0.0.1:$p_http
  timeout client 30s
  timeout server 30s
  timeout http-request 10s
  option httpchk GET /healthz
  http-check expect status 200
  option redispatch
  retry-on conn-failure
  default-server inter 500ms fall 2 rise 2
  server serve0 127.0.0.1:${p_serve[0]} check
  server serve1 127.0.0.1:${p_serve[1]} check
  server serve2 127.0.0.1:${p_serve[2]} check
EOF
haproxy -c -q -f "$dir/haproxy.cfg"
start haproxy haproxy -db -f "$dir/haproxy.cfg"
wait_for "HAProxy to route to the primary" 20 \
  env PGPASSWORD="$secret" PGCONNECT_TIMEOUT=2 psql -h 127.0.0.1 -p "$p_db" -U postgres -d postgres -Atc 'SELECT NOT pg_is_in_recovery()' -v ON_ERROR_STOP=1

phase "HAProxy routing"
# --- the application's role and database ------------------------------------
apppass=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
PGPASSWORD="$secret" psql -q -h 127.0.0.1 -p "$p_db" -U postgres -d postgres -v ON_ERROR_STOP=1 \
  -c "CREATE ROLE fencelab LOGIN PASSWORD '$apppass'" -c "CREATE DATABASE fencelab OWNER fencelab" >/dev/null
db_haproxy="postgres://fencelab:$apppass@127.0.0.1:$p_db/fencelab?sslmode=disable&connect_timeout=2"
db_multihost="postgres://fencelab:$apppass@127.0.0.1:$p_pg0,127.0.0.1:$p_pg1/fencelab?sslmode=disable&connect_timeout=2&target_session_attrs=read-write"
if [ "$route" = haproxy ]; then dburl=$db_haproxy; else dburl=$db_multihost; fi
token_secret=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')

# DIR/env: every value single-quoted for sh (the URLs hold `&`), so
# `set -a; . DIR/env; set +a` gives a shell DATABASE_URL and the token
# secret, and `fencelab check` and `fencelab token` work from there. The
# app's data directory is APP_DATA_DIR, not FENCELAB_DATA_DIR: exported,
# that would move every later fencelab command (a `dev` in the checkout,
# its env file) into this cluster's directory.
q() { printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"; }
{
  echo "# written by deploy/local/up.sh; sh-quoted: set -a; . $dir/env; set +a"
  while read -r k v; do echo "$k=$(q "$v")"; done <<EOF
MODE $mode
DATABASE_URL $dburl
DATABASE_URL_HAPROXY $db_haproxy
DATABASE_URL_MULTIHOST $db_multihost
SUPERUSER_URL postgres://postgres:$secret@127.0.0.1:$p_db/fencelab?sslmode=disable&connect_timeout=2
NODE0_URL postgres://postgres:$secret@127.0.0.1:$p_pg0/fencelab?sslmode=disable&connect_timeout=2
NODE1_URL postgres://postgres:$secret@127.0.0.1:$p_pg1/fencelab?sslmode=disable&connect_timeout=2
NODE0_API http://127.0.0.1:$p_api0
NODE1_API http://127.0.0.1:$p_api1
NODE0_DATA $dir/pg/node0/data
NODE1_DATA $dir/pg/node1/data
ETCD_URL http://127.0.0.1:$p_etcd
HAPROXY_STATS http://127.0.0.1:$p_stats/
APP_URL http://127.0.0.1:$p_http
SERVE0_URL http://127.0.0.1:${p_serve[0]}
SERVE1_URL http://127.0.0.1:${p_serve[1]}
SERVE2_URL http://127.0.0.1:${p_serve[2]}
FENCELAB_TOKEN_SECRET $token_secret
APP_DATA_DIR $dir/app
SUPERVISOR_LOG $dir/log/supervisor.log
EOF
} >"$dir/env"
chmod 0600 "$dir/env"

if [ "$app" = 1 ]; then
  # Every replica and worker shares one data directory, so the upload
  # module's blob store (<data-dir>/upload) is the same for all of them.
  appenv=(env DATABASE_URL="$dburl" FENCELAB_TOKEN_SECRET="$token_secret" FENCELAB_DATA_DIR="$dir/app"
    FENCELAB_LOG_LEVEL="${FENCELAB_LOG_LEVEL:-warn}" FENCELAB_ACCESS_LOG=false FENCELAB_DB_MAX_CONNS=8
    FENCELAB_SHUTDOWN_GRACE=3s)
  phase "migrating"
  "${appenv[@]}" "$bin" migrate up >"$dir/log/migrate.log" 2>&1 || { cat "$dir/log/migrate.log" >&2; "$repo/deploy/local/down.sh" --dir "$dir"; exit 1; }
  # Each replica runs under deploy/local/supervise.sh: one that dies (kill
  # -9, a crash) is started again with backoff, each restart logged in
  # log/supervisor.log, so the topology does not shrink for good while
  # HAProxy routes around the gap.
  sup=(bash "$repo/deploy/local/supervise.sh")
  for i in 0 1 2; do
    start "serve$i" "${sup[@]}" "serve$i" "$dir" -- "${appenv[@]}" "$bin" serve --addr "127.0.0.1:${p_serve[$i]}"
  done
  for i in 0 1; do
    start "worker$i" "${sup[@]}" "worker$i" "$dir" -- "${appenv[@]}" "$bin" worker
  done
  phase "starting 3 serve replicas and 2 workers"
  for i in 0 1 2; do
    wait_for "serve$i" 30 curl -sf "http://127.0.0.1:${p_serve[$i]}/readyz"
  done
  wait_for "HAProxy to route to the replicas" 20 curl -sf "http://127.0.0.1:$p_http/healthz"
fi
# The standby clones the primary while HAProxy, the schema and the app
# come up; the cluster is "up" only once it streams (and, in sync mode, is
# the synchronous standby), so no experiment starts unprotected.
if [ "$mode" = sync ]; then
  wait_for "the synchronous standby" 90 curl -sf "http://127.0.0.1:$standby_api/sync"
else
  wait_for "the standby" 90 curl -sf "http://127.0.0.1:$standby_api/replica"
fi
wait_for "the standby to stream" 60 bash -c "[ \"\$(PGPASSWORD='$secret' psql -h 127.0.0.1 -p $primary_pg -U postgres -d postgres -Atc \"SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'\")\" = 1 ]"

phase "standby streaming"

phase "up"
cat <<EOF
fencelab local cluster up ($mode replication, primary node$primary; every process stops by itself after $lifetime)
  app (HAProxy → 3 serve replicas)  http://127.0.0.1:$p_http
  serve replicas                    http://127.0.0.1:${p_serve[0]}  http://127.0.0.1:${p_serve[1]}  http://127.0.0.1:${p_serve[2]}
  database (HAProxy → primary)      postgres://fencelab:…@127.0.0.1:$p_db/fencelab
  database (multi-host)             postgres://fencelab:…@127.0.0.1:$p_pg0,127.0.0.1:$p_pg1/fencelab?target_session_attrs=read-write
  Patroni REST                      http://127.0.0.1:$p_api0  http://127.0.0.1:$p_api1
  HAProxy stats                     http://127.0.0.1:$p_stats/
  etcd                              http://127.0.0.1:$p_etcd
  secrets and URLs                  $dir/env
  logs                              $dir/log/
  stop                              deploy/local/down.sh --dir $dir
EOF
