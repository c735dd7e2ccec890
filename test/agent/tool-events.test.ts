import { trace } from '@opentelemetry/api';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { recordToolEvent, runTool, withDeadline, type ToolCall } from '../../src';
import { aborted, installOtel, type TestOtel } from '../helpers/otel';

let otel: TestOtel;
beforeAll(() => {
  otel = installOtel();
});
afterAll(() => otel.shutdown());
beforeEach(() => otel.exporter.reset());

function events(spanName: string): Record<string, unknown>[] {
  return otel.span(spanName).events.map((e) => ({ name: e.name, ...e.attributes }));
}

const SECRET = 'sk-live-DO-NOT-LOG';

describe('runTool events', () => {
  it('records queued, started, completed with ids and timings', async () => {
    let call: ToolCall | undefined;
    let rootSpanId = '';
    let cutoff = 0;
    const before = Date.now();
    await withDeadline({ operation: 'agent.run', timeoutMs: 2_000, parent: null }, (d) => {
      rootSpanId = trace.getActiveSpan()!.spanContext().spanId;
      cutoff = Math.floor(d.expiresAtMs);
      return runTool('planner', (c) => {
        call = c;
        return { plan: ['search'] };
      });
    });
    const span = otel.span('planner');
    const list = events('planner');
    expect(list.map((e) => e.name)).toEqual(['tool.queued', 'tool.started', 'tool.completed']);
    for (const e of list) {
      expect(e).toMatchObject({
        'tool.request_id': span.spanContext().traceId,
        'tool.call_id': span.spanContext().spanId,
        'tool.parent_call_id': rootSpanId,
        'tool.operation': 'planner',
        'tool.attempt': 1,
        'deadline.at_ms': cutoff,
      });
      expect(e['deadline.remaining_ms'] as number).toBeLessThanOrEqual(2_000);
      expect(e['tool.observed_at_ms'] as number).toBeGreaterThanOrEqual(before);
      expect(e['deadline.abort.code']).toBeUndefined();
    }
    expect(call).toMatchObject({ requestId: span.spanContext().traceId, callId: span.spanContext().spanId, attempt: 1 });
    expect(span.parentSpanContext?.spanId).toBe(rootSpanId);
  });

  it('records tool.aborted with the abort code and reason when its own cap fires', async () => {
    const err = await withDeadline({ operation: 'agent.run', timeoutMs: 2_000, parent: null }, () =>
      runTool(
        'search',
        async (c) => {
          await aborted(c.signal!);
          throw c.signal!.reason;
        },
        { timeoutMs: 80, attempt: 2 },
      ),
    ).catch((e: unknown) => e);
    expect(err).toMatchObject({ code: 'DEADLINE_EXCEEDED' });
    const last = events('search').at(-1)!;
    expect(last).toMatchObject({
      name: 'tool.aborted',
      'tool.attempt': 2,
      'deadline.abort.code': 'DEADLINE_EXCEEDED',
      'deadline.remaining_ms': 0,
    });
    expect(String(last['deadline.abort.reason'])).toMatch(/deadline of "search" passed/);
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
    expect(events('enrich').map((e) => [e.name, e['deadline.abort.code']])).toEqual([
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
    const list = events('mail.read');
    expect(list.at(-1)).toMatchObject({ name: 'tool.aborted', 'tool.error': 'TypeError' });
    expect(JSON.stringify(otel.spans().map((s) => [s.attributes, s.events, s.status]))).not.toContain(SECRET);
  });

  it('works without a deadline (no deadline fields) and without a span (no-op)', async () => {
    await runTool('offline', () => 1);
    const first = events('offline')[0];
    expect(first['deadline.at_ms']).toBeUndefined();
    expect(first['tool.parent_call_id']).toBeUndefined();
    expect(() => recordToolEvent('tool.started', { operation: 'x' })).not.toThrow();
    expect(() => recordToolEvent('tool.exploded' as never, { operation: 'x' })).toThrow(TypeError);
  });
});
