#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v3, the version the deploy tests name) from the
# Go module proxy into the user's cache directory, where the deploy tests
# look for it (deploy/helm_test.go: lockgate/helm/VERSION/helm under
# $XDG_CACHE_HOME, else ~/.cache). On a machine with no module cache the
# build downloads and compiles Kubernetes' client libraries: minutes, which
# belong to `make deps`, not to the tests' time limit. A binary already
# there is kept; the tests check its version before they use it.
set -euo pipefail
version=v3.22.0
dir="${XDG_CACHE_HOME:-$HOME/.cache}/lockgate/helm/$version"
if [ -x "$dir/helm" ]; then
  echo "deps: helm $version present ($dir/helm)"
  exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d "$dir/build-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
# Outside this module (go install pkg@version), with the tests' settings.
(cd "$tmp" && GOBIN="$tmp" GOFLAGS= CGO_ENABLED=0 go install "helm.sh/helm/v3/cmd/helm@$version")
mv "$tmp/helm" "$dir/helm"
echo "deps: built helm $version in $(( $(date +%s) - start )) s ($dir/helm)"
