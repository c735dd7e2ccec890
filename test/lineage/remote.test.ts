import { describe, expect, it } from 'vitest';
import type { LineageSpan } from '../../src/lineage/model';
import { REMOTE_GRACE_MS } from '../../src/lineage/remote';
import { renderText } from '../../src/lineage/text';
import { renderHtml } from '../../src/lineage/html';
import { buildTree, buildTreeWith, hasViolation, summarize } from '../../src/lineage/tree';

// Lateness across a process boundary: both sides are in the trace, neither
// process flagged anything. Times are epoch µs; the caller's cutoff is T0 + 400 ms.
const T0 = 1_750_000_000_000_000;
const CUTOFF_MS = T0 / 1000 + 400;

function span(id: string, parent: string | undefined, service: string, kind: string, startMs: number, endMs: number, attributes = {}): LineageSpan {
  return { traceId: 'ab'.repeat(16), spanId: id, parentSpanId: parent, service, name: `${kind} ${id}`, kind, startUs: T0 + startMs * 1000, endUs: T0 + endMs * 1000, attributes };
}

const deadline = (outcome: string) => ({ 'deadline.at_ms': CUTOFF_MS, 'deadline.remaining_ms': 400, 'deadline.outcome': outcome });

function treeOf(...spans: LineageSpan[]) {
  return buildTree({ traceId: spans[0].traceId, spans });
}

describe('lateness across a process boundary', () => {
  it('a server that kept working after its caller gave up at the cutoff (the callee has no deadline support)', () => {
    const tree = treeOf(
      span('01', undefined, 'agent', 'internal', 0, 900, deadline('completed')),
      span('02', '01', 'agent', 'client', 10, 402, { ...deadline('expired'), 'deadline.abort.code': 'DEADLINE_EXCEEDED' }),
      span('03', '02', 'tools', 'server', 15, 2_000),
    );
    const server = tree.ordered[2];
    expect(server.remote).toEqual([{ violation: 'remote_ended_after_caller', byMs: 1_598 }]);
    expect(server.facts.late).toBe(false);
    expect(hasViolation([tree])).toBe(true);
    expect(summarize(tree).remoteLate).toEqual([server]);
    const text = renderText(tree);
    expect(text).toMatch(/^ {3}└─ tools: server 03 .*\(no deadline\) {2}✗ LATE remote_ended_after_caller$/m);
    expect(text).toMatch(/^summary: 0 late children, 0 exceeded, 1 aborted, 0 refused, 1 late across processes$/m);
    expect(text).toMatch(
      /^ {2}late across processes: tools: server 03: remote_ended_after_caller, \+1598 ms after its caller ended \(caller agent: client 02\)$/m,
    );
    const page = renderHtml([tree]);
    expect(page).toMatch(/class="bar [^"]*late" data-span-id="03"/);
    expect(page).toContain('<span class="bad">0 late, 1 late across processes</span>');
  });

  it('a remote child that started after its caller\'s cutoff (it waited in a queue or on the network)', () => {
    const tree = treeOf(
      span('01', undefined, 'gateway', 'producer', 0, 5, deadline('completed')),
      span('02', '01', 'worker', 'consumer', 900, 950),
    );
    expect(tree.ordered[1].remote).toEqual([{ violation: 'remote_started_after_cutoff', byMs: 500 }]);
    // A producer's span ends at the send: the consumer outliving it is normal.
    expect(tree.ordered[1].remote.map((r) => r.violation)).not.toContain('remote_ended_after_caller');
  });

  it('a hop that behaved, within the grace for clock skew and abort unwinding, is not flagged', () => {
    const tree = treeOf(
      span('01', undefined, 'agent', 'client', 0, 401, deadline('expired')),
      span('02', '01', 'tools', 'server', 2, 401 + REMOTE_GRACE_MS, deadline('expired')),
      span('03', '02', 'tools', 'client', 3, 300, deadline('completed')),
      // A client → internal pair is no process boundary.
      span('04', '01', 'agent', 'internal', 0, 5_000),
    );
    expect(tree.ordered.map((n) => n.remote)).toEqual([[], [], [], []]);
    expect(hasViolation([tree])).toBe(false);
    expect(renderText(tree)).not.toContain('across processes');
  });

  it('a span late on both counts lists the processor\'s reason first', () => {
    const tree = treeOf(
      span('01', undefined, 'agent', 'client', 0, 100, deadline('expired')),
      span('02', '01', 'tools', 'server', 700, 800, { ...deadline('completed'), 'deadline.late': true, 'deadline.violation': 'started_after_expiry' }),
    );
    expect(renderText(tree)).toMatch(/✗ LATE started_after_expiry,remote_ended_after_caller,remote_started_after_cutoff$/m);
    const summary = summarize(tree);
    expect(summary.late).toHaveLength(1);
    expect(summary.remoteLate).toHaveLength(1);
  });

  it('judges a callee from its own last child when that ended after the caller: the child is judged on its own', () => {
    const spans = [
      span('01', undefined, 'front', 'client', 0, 401, deadline('expired')),
      // The callee waits 600 ms past its caller for a dependency's stop (its child), then answers at once.
      span('02', '01', 'api', 'server', 2, 1_010, deadline('expired')),
      span('03', '02', 'api', 'client', 5, 1_001, { ...deadline('expired'), 'deadline.abort.code': 'DEADLINE_EXCEEDED' }),
    ];
    expect(treeOf(...spans).ordered.map((n) => n.remote)).toEqual([[], [], []]);
    // The same callee going on 600 ms after its child ended is late, reported against its caller's end.
    const goesOn = treeOf(spans[0], { ...spans[1], endUs: T0 + 1_700_000 }, spans[2]);
    expect(goesOn.ordered[1].remote).toEqual([{ violation: 'remote_ended_after_caller', byMs: 1_299 }]);
  });

  it('--grace moves the allowance', () => {
    const spans = [span('01', undefined, 'agent', 'client', 0, 401, deadline('expired')), span('02', '01', 'tools', 'server', 2, 501, deadline('expired'))];
    expect(hasViolation([buildTreeWith({ traceId: spans[0].traceId, spans }, { graceMs: 99 })])).toBe(true);
    expect(hasViolation([buildTreeWith({ traceId: spans[0].traceId, spans }, { graceMs: 100 })])).toBe(false);
    expect(hasViolation([buildTree({ traceId: spans[0].traceId, spans })])).toBe(false);
  });
});

describe('the summary', () => {
  it('counts the spans under the root only, and explains each number in a legend line', () => {
    const late = { ...deadline('expired'), 'deadline.exceeded': true, 'deadline.abort.code': 'DEADLINE_EXCEEDED', 'deadline.late': true, 'deadline.violation': 'ended_after_deadline' };
    const tree = treeOf(
      // The root itself ran late: it is the request, not a late child.
      span('01', undefined, 'front', 'server', 0, 900, late),
      span('02', '01', 'front', 'internal', 1, 800, late),
      span('03', '01', 'front', 'internal', 2, 3, { ...deadline('not_started'), 'deadline.abort.code': 'INSUFFICIENT_BUDGET' }),
    );
    const summary = summarize(tree);
    expect(summary.children).toBe(2);
    expect(summary.late.map((n) => n.span.spanId)).toEqual(['02']);
    const text = renderText(tree);
    expect(text).toMatch(/^summary: 1 late child, 1 exceeded, 1 aborted, 1 refused$/m);
    expect(text).toMatch(
      /^legend: of the 2 spans under the root, late children = flagged deadline\.late by their own span processor; exceeded = still running at their cutoff; aborted = cut or cancelled while running; refused = never started for lack of budget$/m,
    );
    // The gate still sees the root.
    expect(hasViolation([tree])).toBe(true);
  });
});
