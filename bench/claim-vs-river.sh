#!/usr/bin/env bash
# Fenced Fencelab claims vs River (unfenced) on the same PostgreSQL, back to
# back: `fencelab bench claim` and bench/peers/river (a separate Go module)
# each enqueue then drain the same number of no-op jobs with the same number
# of workers and connections (12). Rounds alternate which system goes first
# (a machine that slows down mid-run penalises both alike), and each side's
# run starts right after a checkpoint and vacuums what it left dead before
# it ends, so neither drain meets the other's autovacuum; each round's
# ratio is Fencelab's jobs/s over River's in that round, and the last line
# is the median of those ratios and of each side's rates:
#
#   RESULT claim ratio=… fencelab_jobs_per_sec=… river_jobs_per_sec=… rounds=N jobs=… workers=… conns=… floor_jobs_per_sec=… floor_ratio=… of_floor=…
#
# `fencelab bench claim` fails unless CLAIM-I1..I4 hold after its drain, so
# a round only counts when every fence and event held.
#
# Each round also drains the same number of jobs through the claim floor
# (bench/pgbench/claim-floor.sql under pgbench), a yardstick rather than a
# competitor: the rows a fenced claim and completion cannot do without (the
# claimed job, its history row, an event a transition) and nothing else (no
# handler, no pool, none of the engine's guards, no rows sent back), at the
# fastest of 1, 2 and 4 clients holding at most WORKERS jobs in all.
# floor_ratio is the floor over River: an engine that writes those rows
# beats River by that much only if it costs nothing beyond them. of_floor
# is the share of the floor Fencelab reaches (medians of the rounds).
#
#   bench/claim-vs-river.sh [JOBS] [WORKERS] [ROUNDS]     (defaults 50000 2000 3)
#
# BENCH_DATABASE_URL selects the server; unset, a throwaway local cluster with
# PostgreSQL's durable defaults (fsync on) is started and removed afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${1:-50000}
WORKERS=${2:-2000}
ROUNDS=${3:-3}
CONNS=12
# River fetches at most once per FetchCooldown, MaxWorkers jobs at a time:
# its default (100 ms) caps 100 workers at 1,000 jobs/s whatever the
# database could do. The peer runs at River's minimum (1 ms) so the
# comparison is against River tuned for throughput, not against its cap;
# RIVER_FETCH_COOLDOWN=100ms gives River's default.
RIVER_FETCH_COOLDOWN=${RIVER_FETCH_COOLDOWN:-1ms}
if (( ROUNDS < 1 )); then echo "ROUNDS must be at least 1" >&2; exit 2; fi

. bench/cluster.sh vs-river
throwaway_cluster

go build -o "$tmp/fencelab" ./cmd/fencelab
(cd bench/peers/river && go build -o "$tmp/river" .)

ours=() theirs=() ratios=() floors=() floor_ratios=() of_floors=()
# floor_once CLIENTS BATCH: one drain of the claim floor, in jobs/s.
floor_once() {
  local clients=$1 batch=$2
  psql -q -v ON_ERROR_STOP=1 -v jobs="$JOBS" -f bench/pgbench/claim-floor-setup.sql "$BENCH_DATABASE_URL" >/dev/null
  # Every client claims until the queue is empty; the transactions left
  # over find nothing and cost a round trip each.
  local per=$(( (JOBS + batch * clients - 1) / (batch * clients) + 2 ))
  local start end left events
  start=$(date +%s.%N)
  "$pgbin/pgbench" -n -M prepared -c "$clients" -j "$clients" -t "$per" -D batch="$batch" \
    -f bench/pgbench/claim-floor.sql "$BENCH_DATABASE_URL" >"$tmp/floor.out" 2>&1 || { cat "$tmp/floor.out" >&2; exit 1; }
  end=$(date +%s.%N)
  read -r left events < <(psql -tA -F ' ' "$BENCH_DATABASE_URL" -c \
    "SELECT (SELECT count(*) FROM claim_floor_job), (SELECT count(*) FROM claim_floor_event)")
  # A drain only counts if it was whole: no job left, a claimed and a
  # succeeded event for each.
  [[ $left == 0 && $events == $(( 2 * JOBS )) ]] || { echo "claim floor: $left jobs left, $events events" >&2; exit 1; }
  psql -q "$BENCH_DATABASE_URL" -c "DROP TABLE claim_floor_job, claim_floor_history, claim_floor_event" >/dev/null
  awk -v s="$start" -v e="$end" -v j="$JOBS" 'BEGIN { printf "%.0f", j / (e - s) }'
}
# run_floor: the fastest of 1, 2 and 4 clients, each claiming up to
# min(1000, WORKERS / clients) jobs, so that no more than WORKERS jobs are
# ever held, as in the two engines.
run_floor() {
  local best=0 c b r
  for c in 1 2 4; do
    b=$(( WORKERS / c < 1000 ? WORKERS / c : 1000 ))
    (( b >= 1 )) || continue
    # A failed drain ends the script (set -e does not reach into $(…)).
    r=$(floor_once "$c" "$b") || exit 1
    echo "  floor: $c clients, claims of up to $b: $r jobs/s" >&2
    (( r > best )) && best=$r
  done
  echo "$best"
}
run_ours() {
  "$tmp/fencelab" bench claim --jobs "$JOBS" --workers "$WORKERS" --db-max-conns "$CONNS" --database-url "$BENCH_DATABASE_URL" \
    | tee "$tmp/ours.out" >&2
  grep '^RESULT' "$tmp/ours.out" | sed -E 's/.*jobs_per_sec=([0-9.]+).*/\1/'
}
run_theirs() {
  "$tmp/river" --jobs "$JOBS" --workers "$WORKERS" --db-max-conns "$CONNS" --fetch-cooldown "$RIVER_FETCH_COOLDOWN" --database-url "$BENCH_DATABASE_URL" \
    | tee "$tmp/theirs.out" >&2
  grep '^RESULT' "$tmp/theirs.out" | sed -E 's/.*jobs_per_sec=([0-9.]+).*/\1/'
}
for round in $(seq "$ROUNDS"); do
  if (( round % 2 == 1 )); then a=$(run_ours); b=$(run_theirs); else b=$(run_theirs); a=$(run_ours); fi
  [[ -n "$a" && -n "$b" ]] || { echo "round $round: a run printed no RESULT line" >&2; exit 1; }
  f=$(run_floor)
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')
  fr=$(awk -v f="$f" -v b="$b" 'BEGIN { printf "%.3f", f / b }')
  of=$(awk -v a="$a" -v f="$f" 'BEGIN { printf "%.3f", a / f }')
  ours+=("$a") theirs+=("$b") ratios+=("$r") floors+=("$f") floor_ratios+=("$fr") of_floors+=("$of")
  echo "round $round: fencelab $a jobs/s, river $b jobs/s, ratio $r; floor $f jobs/s ($fr× river, fencelab at $of of it)" >&2
done

echo >&2
echo "fencelab (fenced):  ${ours[*]} jobs/s" >&2
echo "river (unfenced):   ${theirs[*]} jobs/s" >&2
echo "floor (pgbench):    ${floors[*]} jobs/s (the fastest of 1, 2 and 4 clients)" >&2
echo "ratios per round:   ${ratios[*]}  (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
echo "floor/river:        ${floor_ratios[*]}" >&2
printf 'RESULT claim ratio=%.2f fencelab_jobs_per_sec=%.0f river_jobs_per_sec=%.0f rounds=%d jobs=%d workers=%d conns=%d floor_jobs_per_sec=%.0f floor_ratio=%.2f of_floor=%.2f\n' \
  "$(median "${ratios[@]}")" "$(median "${ours[@]}")" "$(median "${theirs[@]}")" "$ROUNDS" "$JOBS" "$WORKERS" "$CONNS" \
  "$(median "${floors[@]}")" "$(median "${floor_ratios[@]}")" "$(median "${of_floors[@]}")"
