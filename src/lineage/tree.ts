import { deadlineFacts, isRefused, type DeadlineFacts, type LineageSpan, type LineageTrace } from './model';
import { remoteLateness, REMOTE_GRACE_MS, type RemoteLateness } from './remote';

export interface TreeOptions {
  /** The allowance for lateness across processes, in ms (`--grace`); default REMOTE_GRACE_MS. */
  graceMs?: number;
}

export interface LineageNode {
  span: LineageSpan;
  facts: DeadlineFacts;
  depth: number;
  parent: LineageNode | undefined;
  children: LineageNode[];
  /** True for the last child of its parent (drawing the tree needs it). */
  last: boolean;
  /** For each ancestor level, whether that ancestor was a last child. */
  ancestorsLast: boolean[];
  /** Lateness across the process boundary to its parent, which neither process flagged itself. */
  remote: RemoteLateness[];
}

export interface LineageTree {
  traceId: string;
  roots: LineageNode[];
  /** Depth-first, children in start order: the order lines and bars are drawn in. */
  ordered: LineageNode[];
  /** Start of the earliest root span, epoch microseconds: time zero for every offset shown. */
  originUs: number;
  /** The root's cutoff in epoch ms, when the root ran under a deadline. */
  rootCutoffMs: number | undefined;
}

/** Counted over the root's descendants (`children`): the root is the request itself, never its own child. */
export interface LineageSummary {
  spans: number;
  children: number;
  late: LineageNode[];
  /** Spans late across a process boundary (see remote.ts); a span can be in both lists. */
  remoteLate: LineageNode[];
  exceeded: number;
  aborted: number;
  refused: number;
}

/** Links spans to their parents; one whose parent is missing becomes a root. Children of a duplicate id attach to the first. */
export function buildTree(trace: LineageTrace): LineageTree {
  return buildTreeWith(trace, {});
}

/** buildTree with options (the CLI's `--grace`). */
export function buildTreeWith(trace: LineageTrace, options: TreeOptions): LineageTree {
  const graceMs = options.graceMs ?? REMOTE_GRACE_MS;
  const nodes = trace.spans.map(
    (span): LineageNode => ({ span, facts: deadlineFacts(span), depth: 0, parent: undefined, children: [], last: true, ancestorsLast: [], remote: [] }),
  );
  const byId = new Map<string, LineageNode>();
  for (const node of nodes) if (!byId.has(node.span.spanId)) byId.set(node.span.spanId, node);

  const roots: LineageNode[] = [];
  for (const node of nodes) {
    const parent = node.span.parentSpanId === undefined ? undefined : byId.get(node.span.parentSpanId);
    if (parent === undefined || parent === node) roots.push(node);
    else {
      node.parent = parent;
      parent.children.push(node);
    }
  }
  const byStart = (a: LineageNode, b: LineageNode) => a.span.startUs - b.span.startUs;
  roots.sort(byStart);

  const ordered: LineageNode[] = [];
  // Iterative walk: a trace can be deep, and a cycle in bad input must not recurse forever.
  const seen = new Set<LineageNode>();
  const stack: { node: LineageNode; depth: number; last: boolean; ancestorsLast: boolean[] }[] = roots
    .map((node, i) => ({ node, depth: 0, last: i === roots.length - 1, ancestorsLast: [] }))
    .reverse();
  while (stack.length > 0) {
    const { node, depth, last, ancestorsLast } = stack.pop()!;
    if (seen.has(node)) continue;
    seen.add(node);
    node.depth = depth;
    node.last = last;
    node.ancestorsLast = ancestorsLast;
    ordered.push(node);
    node.children.sort(byStart);
    const childAncestors = depth === 0 ? [] : [...ancestorsLast, last];
    for (let i = node.children.length - 1; i >= 0; i--) {
      stack.push({ node: node.children[i], depth: depth + 1, last: i === node.children.length - 1, ancestorsLast: childAncestors });
    }
  }
  // Spans caught in a parent cycle were never reached from a root: show them at top level.
  for (const node of nodes) {
    if (seen.has(node)) continue;
    node.parent = undefined;
    ordered.push(node);
  }

  for (const node of nodes) node.remote = remoteLateness(node, graceMs);

  const origin = roots.length > 0 ? roots[0] : nodes[0];
  return {
    traceId: trace.traceId,
    roots,
    ordered,
    originUs: origin === undefined ? 0 : origin.span.startUs,
    rootCutoffMs: origin?.facts.atMs,
  };
}

export function summarize(tree: LineageTree): LineageSummary {
  const root = tree.roots[0];
  const children = tree.ordered.length - (root === undefined ? 0 : 1);
  const summary: LineageSummary = { spans: tree.ordered.length, children, late: [], remoteLate: [], exceeded: 0, aborted: 0, refused: 0 };
  for (const node of tree.ordered) {
    if (node === root) continue;
    const { facts } = node;
    if (facts.late) summary.late.push(node);
    if (node.remote.length > 0) summary.remoteLate.push(node);
    if (facts.exceeded) summary.exceeded++;
    // Refusals never ran (or stopped before a retry); aborts cut running work short.
    if (isRefused(facts)) summary.refused++;
    else if (facts.abortCode !== undefined) summary.aborted++;
  }
  return summary;
}

/** Milliseconds from the trace's time zero to the span's own cutoff. */
export function cutoffOffsetMs(tree: LineageTree, node: LineageNode): number | undefined {
  return node.facts.atMs === undefined ? undefined : node.facts.atMs - tree.originUs / 1000;
}

/** True when the span processor flagged the span late, or it was late across a process boundary. */
export function isLate(node: LineageNode): boolean {
  return node.facts.late || node.remote.length > 0;
}

/** Every reason a span is late: the processor's violations, then the cross-process ones. */
export function lateReasons(node: LineageNode): string[] {
  const own = node.facts.late ? (node.facts.violations.length > 0 ? node.facts.violations : ['late']) : [];
  return [...own, ...node.remote.map((r) => r.violation)];
}

/** True when any span of any tree is late (see isLate). */
export function hasViolation(trees: LineageTree[]): boolean {
  return trees.some((tree) => tree.ordered.some(isLate));
}
