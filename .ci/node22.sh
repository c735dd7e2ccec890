#!/usr/bin/env bash
# Kept for the commands people already type: the Node 22 line of .ci/node-line.sh.
#   bash .ci/node22.sh [vitest paths...]  ==  bash .ci/node-line.sh 22 [vitest paths...]
exec bash "$(dirname "$0")/node-line.sh" 22 "$@"
