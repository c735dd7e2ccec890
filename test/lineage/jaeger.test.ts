import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installOtel, type TestOtel } from '../helpers/otel';
import { otlpToJaeger, type JaegerTagOut, type OtlpJson } from './helpers/otlp-to-jaeger';
import { deadlineScenario, exportAsOtlpJson, SCENARIO_PROCESSOR } from './helpers/scenario';
import { parseTraceText } from '../../src/lineage/load';
import { groupTraces } from '../../src/lineage/model';
import { buildTree } from '../../src/lineage/tree';
import { renderText } from '../../src/lineage/text';
import type { OtlpRequest } from '../../src/lineage/otlp';

// CI has ../shared next to the clone, as the workspace does.
const FIXTURES = resolve(__dirname, '../../../shared/fixtures/jaeger');
const fixture = (name: string) => JSON.parse(readFileSync(join(FIXTURES, name), 'utf8'));

interface JaegerSpanOut {
  spanID: string;
  operationName: string;
  tags: JaegerTagOut[];
}

function tagsOf(answer: { data: { spans: unknown[] }[] }, operation: string): Map<string, JaegerTagOut> {
  const span = (answer.data[0].spans as JaegerSpanOut[]).find((s) => s.operationName === operation);
  if (span === undefined) throw new Error(`no span ${operation}`);
  return new Map(span.tags.map((tag) => [tag.key, tag]));
}

describe('the OTLP → Jaeger conversion used by these tests', () => {
  it("reproduces Jaeger's own answer for its fixture input", () => {
    const converted = otlpToJaeger([fixture('otlp2jaeger-in.json')]);
    expect(converted).toEqual(fixture('otlp2jaeger-out.json'));
  });
});

describe('our spans as Jaeger stores them', () => {
  let otel: TestOtel;
  let requests: OtlpRequest[];
  let answer: ReturnType<typeof otlpToJaeger>;

  beforeAll(async () => {
    otel = installOtel(SCENARIO_PROCESSOR);
    await deadlineScenario();
    requests = await exportAsOtlpJson(otel.spans());
    answer = otlpToJaeger(requests as OtlpJson[]);
  });
  afterAll(() => otel.shutdown());

  it('has the shape of the fixture: one trace, typed {key,type,value} tags, CHILD_OF references', () => {
    const expected = fixture('otlp2jaeger-out.json');
    expect(Object.keys(answer).sort()).toEqual(Object.keys(expected).sort());
    expect(answer.data).toHaveLength(1);
    const ours = answer.data[0].spans as Record<string, unknown>[];
    const theirs = expected.data[0].spans[0] as Record<string, unknown>;
    for (const span of ours) {
      expect(Object.keys(span).sort()).toEqual(Object.keys(theirs).sort());
      for (const tag of span.tags as JaegerTagOut[]) {
        expect(Object.keys(tag).sort()).toEqual(['key', 'type', 'value']);
        expect(['string', 'bool', 'int64', 'float64']).toContain(tag.type);
      }
    }
    const children = ours.filter((s) => s.operationName !== 'request');
    for (const child of children) expect((child.references as { refType: string }[])[0].refType).toBe('CHILD_OF');
  });

  it('carries the deadline numbers as int64 and the flags as bool', () => {
    const ints = ['deadline.at_ms', 'deadline.remaining_ms', 'deadline.budget_ms', 'deadline.remaining_at_end_ms'];
    for (const operation of ['request', 'clamped', 'slow-dependency', 'late-child']) {
      const tags = tagsOf(answer, operation);
      for (const key of ints) {
        expect(tags.get(key)?.type, `${operation} ${key}`).toBe('int64');
        expect(Number.isInteger(tags.get(key)?.value), `${operation} ${key}`).toBe(true);
      }
      expect(tags.get('deadline.exceeded')?.type).toBe('bool');
      expect(tags.get('deadline.outcome')?.type).toBe('string');
    }
    const late = tagsOf(answer, 'late-child');
    expect(late.get('deadline.late')).toEqual({ key: 'deadline.late', type: 'bool', value: true });
    expect(late.get('deadline.violation')).toEqual({ key: 'deadline.violation', type: 'string', value: 'later_than_parent' });
    const slow = tagsOf(answer, 'slow-dependency');
    expect(slow.get('deadline.exceeded')).toEqual({ key: 'deadline.exceeded', type: 'bool', value: true });
    expect(slow.get('deadline.abort.code')?.value).toBe('DEADLINE_EXCEEDED');
    expect(tagsOf(answer, 'retry').get('deadline.outcome')?.value).toBe('not_started');
    // No deadline tag ever degrades to a string holding a number or a boolean.
    for (const span of answer.data[0].spans as JaegerSpanOut[]) {
      for (const tag of span.tags.filter((t) => t.key.startsWith('deadline.'))) {
        if (tag.type === 'string') expect(String(tag.value)).not.toMatch(/^(-?\d+(\.\d+)?|true|false)$/);
      }
    }
  });

  it('reads back from the Jaeger answer exactly as from the OTLP/JSON it came from', () => {
    const fromOtlp = groupTraces(parseTraceText(requests.map((r) => JSON.stringify(r)).join('\n'), 'otlp'));
    const fromJaeger = groupTraces(parseTraceText(JSON.stringify(answer), 'jaeger'));
    const treeOtlp = buildTree(fromOtlp[0]);
    const treeJaeger = buildTree(fromJaeger[0]);
    expect(treeJaeger.ordered.map((n) => [n.span.name, n.depth, n.facts])).toEqual(
      treeOtlp.ordered.map((n) => [n.span.name, n.depth, n.facts]),
    );
    expect(renderText(treeJaeger)).toBe(renderText(treeOtlp));
    expect(renderText(treeJaeger)).toMatch(/late-child .*✗ LATE later_than_parent/);
  });
});

describe('span times, from an OTLP file and from Jaeger', () => {
  // A span of 409,499,880 ns: 409.49988 ms. Jaeger stores its start and its duration truncated to the
  // microsecond (409,499 µs). Kept in fractions of a microsecond, the file's times came out 410 ms apart:
  // a double's step at this epoch, in microseconds, is 0.25 µs.
  const START_NS = '1764650000123456000';
  const END_NS = '1764650000532955880';
  const otlp: OtlpRequest = {
    resourceSpans: [
      {
        resource: { attributes: [{ key: 'service.name', value: { stringValue: 'svc' } }] },
        scopeSpans: [{ spans: [{ traceId: 'ab'.repeat(16), spanId: 'cd'.repeat(8), name: 'op', kind: 2, startTimeUnixNano: START_NS, endTimeUnixNano: END_NS }] }],
      },
    ],
  };
  const jaeger = otlpToJaeger([otlp as OtlpJson]);

  it('are whole microseconds by Jaeger\'s rule: the start truncated, the duration truncated', () => {
    const [fromFile] = parseTraceText(JSON.stringify(otlp), 'otlp');
    const [fromJaeger] = parseTraceText(JSON.stringify(jaeger), 'jaeger');
    expect(fromFile.startUs).toBe(1_764_650_000_123_456);
    expect(fromFile.endUs - fromFile.startUs).toBe(409_499);
    expect([fromJaeger.startUs, fromJaeger.endUs]).toEqual([fromFile.startUs, fromFile.endUs]);
  });

  it('print the same duration from both', () => {
    const render = (text: string, format: 'otlp' | 'jaeger') => renderText(buildTree(groupTraces(parseTraceText(text, format))[0]));
    const fromFile = render(JSON.stringify(otlp), 'otlp');
    expect(fromFile).toMatch(/ 409 ms/);
    expect(render(JSON.stringify(jaeger), 'jaeger')).toBe(fromFile);
  });

  it('leave a timestamp longer than a fixed64 (20 digits) unread: the span starts at 0', () => {
    const huge = structuredClone(otlp);
    huge.resourceSpans![0].scopeSpans![0].spans![0].startTimeUnixNano = '9'.repeat(200_000);
    const [span] = parseTraceText(JSON.stringify(huge), 'otlp');
    expect(span.startUs).toBe(0);
    expect(span.endUs).toBe(Number(BigInt(END_NS) / 1000n));
  });
});
