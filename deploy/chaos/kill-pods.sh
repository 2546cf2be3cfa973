#!/usr/bin/env bash
# Seeded pod-kill chaos for Sluice on Kubernetes, with plain kubectl.
#
# In a loop, for --duration seconds, it picks a victim and deletes it:
#   leader     the Ready driver pod (only the leader passes /readyz)
#   standby    a Running driver pod that is not Ready
#   executor   a Running executor pod, at random
# either forced (--grace-period=0 --force: like a crash, no SIGTERM
# handling) or graceful (SIGTERM: the leader resigns, an executor drains).
# Every kill is printed with a UTC timestamp; after a leader kill it also
# prints how long the cluster went without a Ready driver.
#
# The seed is printed; the same seed against the same cluster state makes
# the same choices (targets, modes, pods by their sorted index, pauses).
#
#   deploy/chaos/kill-pods.sh --seed 42 --duration 300
#   deploy/chaos/kill-pods.sh --targets leader --mode graceful --interval 20
#   deploy/chaos/kill-pods.sh --dry-run --duration 30    # print, delete nothing
#
# Then check the output: deploy/chaos/query's verify Job (see
# deploy/README.md).
set -euo pipefail

usage() {
  cat <<'EOF'
usage: kill-pods.sh [options]
  --seed N             seed of the random choices (default: from the clock; printed)
  --duration SECONDS   how long to keep killing (default 300)
  --interval SECONDS   mean pause between kills; each pause is 50%..150% of it (default 15)
  --targets LIST       comma-separated: leader,standby,executor (default: all three)
  --mode MODE          forced, graceful or mixed (default mixed: each kill picks one)
  --namespace NS       the namespace of the Sluice pods (default sluice)
  --context CTX        the kubectl context (default: the current one)
  --dry-run            choose and print, but delete nothing
  -h, --help           this help
Environment: KUBECTL (default kubectl).
EOF
}

seed=""
duration=300
interval=15
targets="leader,standby,executor"
mode="mixed"
namespace="sluice"
context=""
dry_run=0

die() {
  echo "kill-pods.sh: $*" >&2
  exit 2
}

is_uint() {
  [[ "$1" =~ ^[0-9]+$ ]]
}

while [ $# -gt 0 ]; do
  case "$1" in
    --seed) seed="${2:?--seed needs a value}"; shift 2 ;;
    --duration) duration="${2:?--duration needs a value}"; shift 2 ;;
    --interval) interval="${2:?--interval needs a value}"; shift 2 ;;
    --targets) targets="${2:?--targets needs a value}"; shift 2 ;;
    --mode) mode="${2:?--mode needs a value}"; shift 2 ;;
    --namespace | -n) namespace="${2:?--namespace needs a value}"; shift 2 ;;
    --context) context="${2:?--context needs a value}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
done

[ -n "$seed" ] || seed=$(( $(date +%s) % 1000000007 ))
is_uint "$seed" || die "--seed must be an unsigned integer, got '$seed'"
is_uint "$duration" || die "--duration must be whole seconds, got '$duration'"
is_uint "$interval" && [ "$interval" -ge 1 ] || die "--interval must be at least 1 second, got '$interval'"
case "$mode" in forced | graceful | mixed) ;; *) die "--mode must be forced, graceful or mixed, got '$mode'" ;; esac

IFS=',' read -r -a target_list <<<"$targets"
[ ${#target_list[@]} -gt 0 ] || die "--targets is empty"
for t in "${target_list[@]}"; do
  case "$t" in leader | standby | executor) ;; *) die "unknown target '$t' (leader, standby, executor)" ;; esac
done

KUBECTL=${KUBECTL:-kubectl}
command -v "$KUBECTL" >/dev/null 2>&1 || die "$KUBECTL not found: install kubectl (https://kubernetes.io/docs/tasks/tools/)"
kube=("$KUBECTL" --namespace "$namespace")
[ -z "$context" ] || kube+=(--context "$context")

DRIVER_SELECTOR="app.kubernetes.io/name=sluice-driver"
EXECUTOR_SELECTOR="app.kubernetes.io/name=sluice-executor"

# Bash's generator, seeded: the same seed gives the same sequence. Draw in
# this shell only: a subshell, like $(...), reseeds RANDOM.
RANDOM=$seed
# Sets R to a number in 0..$1-1.
rand_below() {
  R=$(( RANDOM % $1 ))
}

now() {
  date -u +%Y-%m-%dT%H:%M:%SZ
}

log() {
  echo "$(now) $*"
}

# Lines "<name> <phase> <ready> <deleting>" of the pods matching $1, sorted
# by name so that an index means the same pod for the same cluster state.
pods() {
  "${kube[@]}" get pods --selector "$1" -o \
    jsonpath='{range .items[*]}{.metadata.name}{"|"}{.status.phase}{"|"}{.status.conditions[?(@.type=="Ready")].status}{"|"}{.metadata.deletionTimestamp}{"\n"}{end}' |
    awk -F'|' '$1 != "" { print $1, $2, ($3 == "" ? "False" : $3), ($4 == "" ? "no" : "yes") }' | sort
}

# The names of the live (Running, not being deleted) pods matching $1 whose
# Ready status is $2 (True, False or any).
live_pods() {
  pods "$1" | awk -v want="$2" '$2 == "Running" && $4 == "no" && (want == "any" || $3 == want) { print $1 }'
}

ready_drivers() {
  live_pods "$DRIVER_SELECTOR" True
}

# Deletes pod $1 ($2: forced or graceful), unless this is a dry run.
delete_pod() {
  local pod=$1 how=$2
  local args=(delete pod "$pod" --wait=false --ignore-not-found)
  [ "$how" = forced ] && args+=(--grace-period=0 --force)
  if [ "$dry_run" = 1 ]; then
    echo "  (dry run) ${kube[*]} ${args[*]}"
  else
    "${kube[@]}" "${args[@]}" 2>&1 | sed 's/^/  /'
  fi
}

now_ms() {
  date +%s%3N
}

# After the leader was killed: how long until another driver is Ready.
time_to_new_leader() {
  local old=$1 start leader
  start=$(now_ms)
  while [ $(( $(now_ms) - start )) -lt 60000 ]; do
    leader=$(ready_drivers | grep -vx "$old" | head -n 1 || true)
    if [ -n "$leader" ]; then
      log "new leader $leader is Ready after $(( $(now_ms) - start )) ms"
      return
    fi
    sleep 0.2
  done
  log "WARNING: no other driver became Ready within 60 s of killing $old"
}

log "kill-pods: seed=$seed duration=${duration}s interval=${interval}s targets=$targets mode=$mode namespace=$namespace$([ "$dry_run" = 1 ] && echo ' (dry run)')"
log "replay with: $0 --seed $seed --duration $duration --interval $interval --targets $targets --mode $mode --namespace $namespace"

"${kube[@]}" get pods --selector "$DRIVER_SELECTOR" >/dev/null ||
  die "cannot list pods in namespace $namespace (is the cluster reachable and Sluice deployed?)"

end=$(( $(date +%s) + duration ))
kills=0
skips=0
round=0
while [ "$(date +%s)" -lt "$end" ]; do
  round=$(( round + 1 ))
  # Every draw happens in every round, in the same order, so a skipped
  # round does not shift the choices of the next ones.
  rand_below ${#target_list[@]}
  target=${target_list[$R]}
  rand_below 2
  how=$mode
  if [ "$mode" = mixed ]; then
    [ "$R" = 0 ] && how=forced || how=graceful
  fi
  rand_below 1000
  pick=$R
  rand_below $(( interval + 1 ))
  pause=$(( interval / 2 + R ))

  case "$target" in
    leader) candidates=$(ready_drivers) ;;
    standby) candidates=$(live_pods "$DRIVER_SELECTOR" False) ;;
    executor) candidates=$(live_pods "$EXECUTOR_SELECTOR" any) ;;
  esac
  count=$(printf '%s\n' "$candidates" | grep -c . || true)

  if [ "$count" -eq 0 ]; then
    skips=$(( skips + 1 ))
    log "round $round: no $target pod to kill (failover or restart in progress); skipping"
  else
    victim=$(printf '%s\n' "$candidates" | sed -n "$(( pick % count + 1 ))p")
    kills=$(( kills + 1 ))
    log "round $round: killing $target $victim ($how)"
    delete_pod "$victim" "$how"
    if [ "$target" = leader ] && [ "$dry_run" = 0 ]; then
      time_to_new_leader "$victim"
    fi
  fi

  remaining=$(( end - $(date +%s) ))
  [ "$remaining" -gt 0 ] || break
  [ "$pause" -lt "$remaining" ] || pause=$remaining
  sleep "$pause"
done

log "kill-pods: done: $kills kills, $skips skipped rounds (seed=$seed)"
