#!/usr/bin/env bash
# Installs the Debian packages the real image tests need (tests/deploy/test_image.py, marker
# `containers`): daemonless builders, a registry on loopback and debootstrap for a base image,
# and kubectl (kubernetes-client) for the local Knative API's tests (tests/localstack/knative).
# Also wrk, so the tests of `modelfn tune --client wrk` and modelfn.client.wrk run instead of
# skipping (one small package in the same apt-get; tune itself never installs it).
# crun does not work in these sandboxes (cgroups in hybrid mode); the tests pass --runtime runc.
# Usage (as root, Debian bookworm): scripts/ci-containers.sh
set -euo pipefail
PACKAGES=(buildah podman skopeo docker-registry debootstrap runc umoci wrk)
# Debian's kubectl, unless one is already there (another package may own /usr/bin/kubectl)
command -v kubectl >/dev/null 2>&1 || PACKAGES+=(kubernetes-client)
missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
if [ "${#missing[@]}" -eq 0 ]; then
  echo "ci-containers: all of ${PACKAGES[*]} are installed"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
