import { hrTimeToMilliseconds } from '@opentelemetry/core';
import { trace } from '@opentelemetry/api';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { recordToolEvent, runTool, withDeadline, type ToolCall } from '../../src';
import { aborted, installOtel, sleep, type TestOtel } from '../helpers/otel';

let otel: TestOtel;
beforeAll(() => {
  otel = installOtel();
});
afterAll(() => otel.shutdown());
beforeEach(() => otel.exporter.reset());

interface RecordedEvent {
  name: string;
  atMs: number;
  attributes: Record<string, unknown>;
}

function events(spanName: string): RecordedEvent[] {
  return otel.span(spanName).events.map((e) => ({ name: e.name, atMs: hrTimeToMilliseconds(e.time), attributes: { ...e.attributes } }));
}

/** Names the events used to carry that only repeated the trace id, span id, span name and event time. */
const REPEATS = ['tool.request_id', 'tool.call_id', 'tool.operation', 'tool.observed_at_ms'];

const SECRET = 'sk-live-DO-NOT-LOG';

describe('runTool', () => {
  it('runs the tool between tool.started and tool.completed, with the time left falling as it works', async () => {
    let insideAtMs = 0;
    let rootSpanId = '';
    await withDeadline({ operation: 'agent.run', timeoutMs: 5_000, parent: null }, () => {
      rootSpanId = trace.getActiveSpan()!.spanContext().spanId;
      return runTool('planner', async () => {
        insideAtMs = Date.now();
        // 100 ms of work: the events on either side of it must be at least that far apart.
        await sleep(100);
      });
    });
    const [queued, started, completed] = events('planner');
    expect([queued.name, started.name, completed.name]).toEqual(['tool.queued', 'tool.started', 'tool.completed']);
    expect(started.atMs).toBeLessThanOrEqual(insideAtMs);
    expect(completed.atMs).toBeGreaterThanOrEqual(insideAtMs + 95);
    // Whole ms on both sides, and a timer never fires early: at least 95 ms of the budget went by.
    expect(completed.attributes['deadline.remaining_ms'] as number).toBeLessThanOrEqual((started.attributes['deadline.remaining_ms'] as number) - 95);
    // The tool span is a child of the calling span: the SDK says so, the events need not repeat it.
    expect(otel.span('planner').parentSpanContext?.spanId).toBe(rootSpanId);
  });

  it('follows the GenAI conventions on the span and drops event attributes that only repeat the span', async () => {
    let call: ToolCall | undefined;
    await withDeadline({ operation: 'agent.run', timeoutMs: 5_000, parent: null }, () =>
      runTool('search', (c) => {
        call = c;
      }, { toolCallId: 'call_mszuSIzqtI65i1wAUOE8w5H4', attempt: 2 }),
    );
    const span = otel.span('search');
    expect(span.attributes).toMatchObject({
      'gen_ai.operation.name': 'execute_tool',
      'gen_ai.tool.name': 'search',
      'gen_ai.tool.call.id': 'call_mszuSIzqtI65i1wAUOE8w5H4',
    });
    for (const event of events('search')) {
      expect(event.attributes).toMatchObject({ 'gen_ai.tool.name': 'search', 'gen_ai.tool.call.id': 'call_mszuSIzqtI65i1wAUOE8w5H4', 'tool.attempt': 2 });
      for (const name of [...REPEATS, 'tool.parent_call_id']) expect(event.attributes).not.toHaveProperty(name);
    }
    expect(call).toMatchObject({ requestId: span.spanContext().traceId, callId: span.spanContext().spanId, toolCallId: 'call_mszuSIzqtI65i1wAUOE8w5H4' });
  });

  it.each([
    ['shorter than the caller: the tool gets its own, earlier cutoff', 500, true],
    ['longer than the caller: clamped to the caller cutoff', 60_000, false],
  ])('timeoutMs %s', async (_name, timeoutMs, own) => {
    let rootCutoff = 0;
    let toolCutoff = 0;
    await withDeadline({ operation: 'agent.run', timeoutMs: 5_000, parent: null }, (root) => {
      rootCutoff = Math.floor(root.expiresAtMs);
      return runTool('fetch.page', (c) => {
        toolCutoff = Math.floor(c.deadline!.expiresAtMs);
      }, { timeoutMs });
    });
    for (const event of events('fetch.page')) expect(event.attributes['deadline.at_ms']).toBe(toolCutoff);
    if (own) expect(toolCutoff).toBeLessThan(rootCutoff - 4_000);
    else expect(toolCutoff).toBe(rootCutoff);
  });

  it('records tool.aborted at its own cap, with the abort code and reason', async () => {
    let cutoff = 0;
    const err = await withDeadline({ operation: 'agent.run', timeoutMs: 5_000, parent: null }, () =>
      runTool(
        'search',
        async (c) => {
          cutoff = c.deadline!.expiresAtMs;
          await aborted(c.signal!);
          throw c.signal!.reason;
        },
        { timeoutMs: 80 },
      ),
    ).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'DEADLINE_EXCEEDED' });
    const last = events('search').at(-1)!;
    expect(last.name).toBe('tool.aborted');
    expect(last.attributes).toMatchObject({ 'deadline.abort.code': 'DEADLINE_EXCEEDED', 'deadline.remaining_ms': 0 });
    // Observed once the cap fired, never before it (1 ms for the epoch clock's rounding).
    expect(last.atMs).toBeGreaterThanOrEqual(cutoff - 1);
    expect(String(last.attributes['deadline.abort.reason'])).toMatch(/deadline of "search" passed/);
    expect(otel.span('search').attributes['deadline.outcome']).toBe('expired');
  });

  it('refuses a tool that cannot fit: queued then aborted, outcome not_started, never called', async () => {
    let called = false;
    const err = await withDeadline({ operation: 'agent.run', timeoutMs: 300, parent: null }, () =>
      runTool(
        'enrich',
        () => {
          called = true;
        },
        { minUsefulMs: 500 },
      ),
    ).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'INSUFFICIENT_BUDGET' });
    expect(called).toBe(false);
    expect(events('enrich').map((e) => [e.name, e.attributes['deadline.abort.code']])).toEqual([
      ['tool.queued', undefined],
      ['tool.aborted', 'INSUFFICIENT_BUDGET'],
    ]);
    expect(otel.span('enrich').attributes['deadline.outcome']).toBe('not_started');
  });

  it('never records arguments, bodies, prompts or credentials, even from a failing tool', async () => {
    const args = { prompt: `summarise my inbox ${SECRET}`, apiKey: SECRET };
    await withDeadline({ operation: 'agent.run', timeoutMs: 2_000, parent: null }, () =>
      runTool('mail.read', () => {
        throw new TypeError(`bad key ${args.apiKey} for ${args.prompt}`);
      }),
    ).catch(() => undefined);
    expect(events('mail.read').at(-1)).toMatchObject({ name: 'tool.aborted', attributes: { 'tool.error': 'TypeError' } });
    expect(JSON.stringify(otel.spans().map((s) => [s.attributes, s.events, s.status]))).not.toContain(SECRET);
  });

  it('works without a deadline (no deadline fields), and refuses a toolCallId that is not an id', async () => {
    await runTool('offline', () => 1);
    expect(events('offline')[0].attributes['deadline.at_ms']).toBeUndefined();
    await expect(runTool('x', () => 1, { toolCallId: '' })).rejects.toThrow(TypeError);
    await expect(runTool('x', () => 1, { toolCallId: 'x'.repeat(257) })).rejects.toThrow(TypeError);
  });
});

describe('recordToolEvent', () => {
  it('adds one event to a span that is not the tool’s own, naming the tool and the call that started it', () => {
    const producer = trace.getTracer('test').startSpan('enqueue');
    recordToolEvent('tool.queued', { operation: 'report.build', span: producer, parentCallId: 'a1b2c3d4e5f60708', toolCallId: 'call_1' });
    producer.end();
    const [event] = events('enqueue');
    expect(event.name).toBe('tool.queued');
    expect(event.attributes).toEqual({ 'gen_ai.tool.name': 'report.build', 'gen_ai.tool.call.id': 'call_1', 'tool.parent_call_id': 'a1b2c3d4e5f60708', 'tool.attempt': 1 });
  });

  it('is a no-op without a span, and refuses an unknown event name', () => {
    expect(() => recordToolEvent('tool.started', { operation: 'x' })).not.toThrow();
    expect(() => recordToolEvent('tool.exploded' as never, { operation: 'x' })).toThrow(TypeError);
  });
});
