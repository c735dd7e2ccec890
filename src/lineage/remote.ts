import type { LineageNode } from './tree';

/**
 * Lateness no single process can see, from both sides of a process boundary:
 * - `remote_ended_after_caller`: the server span went on past its client span's end (plus the
 *   allowance, and its own last child's end, which is judged on its own).
 * - `remote_started_after_cutoff`: the remote child started after its caller's cutoff.
 */
export type RemoteViolation = 'remote_ended_after_caller' | 'remote_started_after_cutoff';

export interface RemoteLateness {
  violation: RemoteViolation;
  /** How far past the caller's end or cutoff, in ms. */
  byMs: number;
}

/** Clear of clock skew (a few ms) and a loaded host's abort unwinding (100 ms or more). */
export const REMOTE_GRACE_MS = 250;

const CALLERS = new Set(['client', 'producer']);
const CALLEES = new Set(['server', 'consumer']);

/** The findings for one node, given its parent in the trace. */
export function remoteLateness(node: LineageNode, graceMs = REMOTE_GRACE_MS): RemoteLateness[] {
  const parent = node.parent;
  if (parent === undefined || !CALLERS.has(parent.span.kind) || !CALLEES.has(node.span.kind)) return [];
  const found: RemoteLateness[] = [];
  // A producer's span ends at the send; only a client waits for the answer.
  if (parent.span.kind === 'client' && node.span.kind === 'server') {
    const stopAtUs = node.children.reduce((end, child) => Math.max(end, child.span.endUs), parent.span.endUs);
    // Reported as the time past the caller's end, which is what a reader compares in the trace.
    if ((node.span.endUs - stopAtUs) / 1000 > graceMs) {
      found.push({ violation: 'remote_ended_after_caller', byMs: (node.span.endUs - parent.span.endUs) / 1000 });
    }
  }
  const cutoffMs = parent.facts.atMs ?? node.facts.atMs;
  if (cutoffMs !== undefined) {
    const overMs = node.span.startUs / 1000 - cutoffMs;
    if (overMs > graceMs) found.push({ violation: 'remote_started_after_cutoff', byMs: overMs });
  }
  return found;
}
