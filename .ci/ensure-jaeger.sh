#!/usr/bin/env bash
# Builds the pinned Jaeger v2 (an OpenTelemetry Collector distribution with the
# jaeger_query UI/API, memory storage and the spanmetrics connector) from the Go
# module proxy into a cache outside the repository, and reuses it while the pin
# in deploy/jaeger/VERSION is unchanged. The module's v1.x tags carry the v2
# `cmd/jaeger` (v1.76.0 is Jaeger v2.13.0).
#
# Prints the binary's path as its last line. Go is the one on PATH, else the one
# in OTEL_DEADLINE_GO_ROOT (default /usr/local/go). Without Go, it fails with a
# message naming the alternative (docker-compose runs the jaegertracing/jaeger image).
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(tr -d '[:space:]' < deploy/jaeger/VERSION)
cache_root=${OTEL_DEADLINE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-deadline}
dir="$cache_root/jaeger/$version"
bin="$dir/jaeger"

if [ -x "$bin" ]; then
  echo "ensure-jaeger: Jaeger $version already built"
  echo "$bin"
  exit 0
fi

# Go's own installer puts it in /usr/local/go, which a non-login shell (CI's) may not have on PATH.
go_root=${OTEL_DEADLINE_GO_ROOT:-/usr/local/go}
if ! command -v go >/dev/null 2>&1 && [ -x "$go_root/bin/go" ]; then
  PATH="$go_root/bin:$PATH"
fi
if ! command -v go >/dev/null 2>&1; then
  cat >&2 <<MSG
ensure-jaeger: Go is not installed, so Jaeger $version cannot be built here.
  Install Go (1.24 or newer) and run: bash .ci/ensure-jaeger.sh
  Without Go, run Jaeger and Prometheus from docker-compose.yml instead:
    docker compose up --build
MSG
  exit 1
fi

echo "ensure-jaeger: building Jaeger $version with $(go version | cut -d' ' -f3) (takes several minutes once)"
start=$(date +%s)
tmp="$dir.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp" "$dir"
trap 'rm -rf "$tmp"' EXIT
# `go install pkg@version` refuses this module (its go.mod has a replace
# directive), so build inside the downloaded module, where go.mod and go.sum
# apply exactly as upstream's own build uses them.
if ! json=$(cd "$tmp" && go mod download -json "github.com/jaegertracing/jaeger@$version" 2>&1); then
  echo "ensure-jaeger: cannot download github.com/jaegertracing/jaeger@$version:" >&2
  printf '%s\n' "$json" >&2
  exit 1
fi
src=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$src/cmd/jaeger" ] || { echo "ensure-jaeger: no cmd/jaeger in the module at $version" >&2; exit 1; }
# Upstream releases v1.x and v2.x from one tag pair; its changelog names both.
v2=$(sed -n "s|^$version / \(v2\.[0-9.]*\) .*|\1|p" "$src/CHANGELOG.md" | head -n 1)
if [ -z "$v2" ]; then
  echo "ensure-jaeger: the changelog of $version names no Jaeger v2 release; pin a v1.x tag released with a v2.x" >&2
  exit 1
fi
echo "ensure-jaeger: module $version is Jaeger $v2"
# -trimpath and -s -w: no local paths, no symbol tables; a smaller binary that
# links faster. The version flag makes `jaeger version` name the pin.
# Go names every module it downloads (about 300 here): the log keeps them, the output a count.
if ! (cd "$src" && go build -trimpath \
  -ldflags="-s -w -X github.com/jaegertracing/jaeger/internal/version.latestVersion=$version" \
  -o "$tmp/jaeger" ./cmd/jaeger) >"$tmp/build.log" 2>&1; then
  cat "$tmp/build.log" >&2
  echo "ensure-jaeger: go build failed" >&2
  exit 1
fi
echo "ensure-jaeger: $(grep -c '^go: downloading' "$tmp/build.log" || true) modules downloaded"
grep -v '^go: downloading' "$tmp/build.log" || true
# Renamed into place in one step, so a concurrent run sees no half-written binary.
mv "$tmp/jaeger" "$bin.new.$$"
mv "$bin.new.$$" "$bin"
echo "ensure-jaeger: built in $(( $(date +%s) - start ))s"
echo "$bin"
