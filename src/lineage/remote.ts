import type { LineageNode } from './tree';

/**
 * Lateness that no single process can see, found by comparing the two sides of
 * a process boundary in one trace (a CLIENT span and the SERVER span it caused,
 * or a PRODUCER and its CONSUMER):
 *
 * - `remote_ended_after_caller`: the server span went on after the client span
 *   that called it ended, by more than the allowance. The caller gave up (or
 *   was answered by a proxy) and the callee kept working, e.g. a tool server
 *   that ignores the deadline. The span processor's rule, across processes:
 *   the callee should stop when its caller ended, or when its own last child
 *   ended if that was later (that child is judged on its own, so a server
 *   waiting for its database's cancel round trip is not blamed for it).
 * - `remote_started_after_cutoff`: the remote child started after the cutoff
 *   its caller ran under: the request or message waited on the way past it.
 *
 * Each side's process only knows its own clock and spans, so its span
 * processor cannot flag these; the trace holds both sides.
 */
export type RemoteViolation = 'remote_ended_after_caller' | 'remote_started_after_cutoff';

export interface RemoteLateness {
  violation: RemoteViolation;
  /** How far past the caller's end or cutoff, in ms. */
  byMs: number;
}

/**
 * Two processes' clocks, and the time an abort takes to unwind through a busy
 * server, both put some ms between the sides of a hop that behaved: NTP keeps
 * clocks on one network within a few ms, but a loaded host can stall a process
 * for 100 ms or more. 250 ms stays clear of both; a callee that ignores its
 * caller's deadline keeps working for its whole run, usually far longer.
 */
export const REMOTE_GRACE_MS = 250;

/** The end of the node's last child in the trace, in epoch microseconds, or undefined. */
function lastChildEndUs(node: LineageNode): number | undefined {
  let last: number | undefined;
  for (const child of node.children) if (last === undefined || child.span.endUs > last) last = child.span.endUs;
  return last;
}

const CALLERS = new Set(['client', 'producer']);
const CALLEES = new Set(['server', 'consumer']);

/** The findings for one node, given its parent in the trace. */
export function remoteLateness(node: LineageNode, graceMs = REMOTE_GRACE_MS): RemoteLateness[] {
  const parent = node.parent;
  if (parent === undefined || !CALLERS.has(parent.span.kind) || !CALLEES.has(node.span.kind)) return [];
  const found: RemoteLateness[] = [];
  // A producer's span ends at the send; only a client waits for the answer.
  if (parent.span.kind === 'client' && node.span.kind === 'server') {
    const childEnd = lastChildEndUs(node);
    const stopAtUs = childEnd !== undefined && childEnd > parent.span.endUs ? childEnd : parent.span.endUs;
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
