#!/usr/bin/env bash
# Installs what building and testing Sluice needs when it is missing:
# protoc (prost/tonic build scripts) and etcd (the HA tests).
# As root it uses apt-get; otherwise it prints the command to run.
set -euo pipefail

need=()
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
if [ "${SLUICE_NEED_ETCD:-1}" = 1 ]; then
  command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
fi

if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing: ${need[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  else
    echo "missing: ${need[*]}. Install them with:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y ${need[*]}" >&2
    exit 1
  fi
fi
