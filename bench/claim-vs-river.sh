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
#   RESULT claim ratio=… fencelab_jobs_per_sec=… river_jobs_per_sec=… rounds=N jobs=… workers=…
#
# `fencelab bench claim` fails unless CLAIM-I1..I4 hold after its drain, so
# a round only counts when every fence and event held.
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

ours=() theirs=() ratios=()
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
  r=$(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')
  ours+=("$a") theirs+=("$b") ratios+=("$r")
  echo "round $round: fencelab $a jobs/s, river $b jobs/s, ratio $r" >&2
done

echo >&2
echo "fencelab (fenced):  ${ours[*]} jobs/s" >&2
echo "river (unfenced):   ${theirs[*]} jobs/s" >&2
echo "ratios per round:   ${ratios[*]}  (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
printf 'RESULT claim ratio=%.2f fencelab_jobs_per_sec=%.0f river_jobs_per_sec=%.0f rounds=%d jobs=%d workers=%d conns=%d\n' \
  "$(median "${ratios[@]}")" "$(median "${ours[@]}")" "$(median "${theirs[@]}")" "$ROUNDS" "$JOBS" "$WORKERS" "$CONNS"
