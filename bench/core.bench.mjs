// npm run bench — the core, side by side with the baselines, in one process.
//  (a) open + dispose a child under a long-lived root: this package vs a
//      seed-000-style child (setTimeout + AbortSignal.any per child).
//  (b) propagator inject + extract vs W3CTraceContextPropagator.
//  (c) a span started and ended with and without DeadlineSpanProcessor: an empty one, and
//      an http-sized one kept alive as a batch processor keeps it.
// Writes bench/results/core.json.
import { ROOT_CONTEXT, defaultTextMapGetter, defaultTextMapSetter, trace, TraceFlags } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { DeadlinePropagator, DeadlineSpanProcessor, openDeadline, setDeadline } from '../dist/esm/index.mjs';
import { writeResult } from './report.mjs';

if (typeof globalThis.gc !== 'function') {
  console.error('run with node --expose-gc (npm run bench does)');
  process.exit(2);
}

const ROUNDS = 7;
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const fmt = (n, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

function settle() {
  for (let i = 0; i < 4; i++) globalThis.gc();
  return process.memoryUsage().heapUsed;
}

/** Times `ops` calls of `fn` per round, alternating candidates each round; returns median ns/op per candidate. */
function sideBySide(candidates, ops) {
  const samples = new Map(candidates.map(([name]) => [name, []]));
  for (let round = 0; round < ROUNDS; round++) {
    for (const [name, fn] of candidates) {
      const start = process.hrtime.bigint();
      for (let i = 0; i < ops.get(name); i++) fn(i);
      samples.get(name).push(Number(process.hrtime.bigint() - start) / ops.get(name));
    }
  }
  return new Map([...samples].map(([name, xs]) => [name, median(xs)]));
}

// ---- (a) children under a long-lived root
const root = openDeadline({ operation: 'root', timeoutMs: 3_600_000, parent: null });
void root.signal; // armed, as in a real server where the root's signal is used
const seedRoot = new AbortController();

function seedChild() {
  const local = new AbortController();
  const timer = setTimeout(() => local.abort(new Error('deadline')), 60_000);
  const signal = AbortSignal.any([local.signal, seedRoot.signal]);
  return { signal, dispose: () => clearTimeout(timer) };
}
const candidatesA = [
  ['otel-deadline: open + dispose', () => root.child('child', 60_000).dispose()],
  ['otel-deadline: open + signal + dispose', () => {
    const c = root.child('child', 60_000);
    void c.signal;
    c.dispose();
  }],
  ['seed style: setTimeout + AbortSignal.any', () => {
    const c = seedChild();
    void c.signal;
    c.dispose();
  }],
];
const opsA = new Map([
  [candidatesA[0][0], 200_000],
  [candidatesA[1][0], 100_000],
  [candidatesA[2][0], 10_000],
]);
// Warm up every candidate before measuring.
for (const [, fn] of candidatesA) for (let i = 0; i < 5_000; i++) fn(i);
const timeA = sideBySide(candidatesA, opsA);

const MILLION = 1_000_000;
function retainedAfterMillion(fn) {
  const before = settle();
  for (let i = 0; i < MILLION; i++) fn(i);
  return (settle() - before) / 1024 / 1024;
}
const retainedA = new Map(candidatesA.map(([name, fn]) => [name, retainedAfterMillion(fn)]));

// ---- (b) propagator inject + extract
const deadlinePropagator = new DeadlinePropagator();
const traceContextPropagator = new W3CTraceContextPropagator();
const deadline = openDeadline({ operation: 'hop', timeoutMs: 3_600_000, parent: null });
const deadlineCtx = setDeadline(ROOT_CONTEXT, deadline);
const spanCtx = trace.setSpanContext(ROOT_CONTEXT, {
  traceId: '0af7651916cd43dd8448eb211c80319c',
  spanId: 'b7ad6b7169203331',
  traceFlags: TraceFlags.SAMPLED,
});
function roundTrip(propagator, ctx) {
  const carrier = {};
  propagator.inject(ctx, carrier, defaultTextMapSetter);
  return propagator.extract(ROOT_CONTEXT, carrier, defaultTextMapGetter);
}
const candidatesB = [
  ['DeadlinePropagator inject + extract', () => roundTrip(deadlinePropagator, deadlineCtx)],
  ['W3CTraceContextPropagator inject + extract', () => roundTrip(traceContextPropagator, spanCtx)],
];
const opsB = new Map(candidatesB.map(([name]) => [name, 100_000]));
for (const [, fn] of candidatesB) for (let i = 0; i < 10_000; i++) fn(i);
const timeB = sideBySide(candidatesB, opsB);

// ---- (c) span processor: a span started and ended under a deadline, with and without it
const noopExporter = { export: (_spans, done) => done({ code: 0 }), shutdown: async () => {}, forceFlush: async () => {} };
const plainProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(noopExporter)] });
const deadlineProvider = new BasicTracerProvider({
  spanProcessors: [new DeadlineSpanProcessor(), new SimpleSpanProcessor(noopExporter)],
});
const plainTracer = plainProvider.getTracer('bench');
const deadlineTracer = deadlineProvider.getTracer('bench');
const candidatesC = [
  ['span without DeadlineSpanProcessor', () => plainTracer.startSpan('op', {}, deadlineCtx).end()],
  ['span with DeadlineSpanProcessor', () => deadlineTracer.startSpan('op', {}, deadlineCtx).end()],
];
// An http client span as instrumentation-undici makes it: nine attributes at start, three more
// with the response. The spans stay reachable for a while, as in a batch span processor's queue,
// so that garbage collection is part of the cost.
const HTTP_START_ATTRIBUTES = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`http.start.${i}`, i % 2 === 0 ? i : `v${i}`]));
const HTTP_RESPONSE_ATTRIBUTES = { 'http.response.status_code': 200, 'http.response.size': 4, 'network.peer.port': 8080 };
const RETAINED_SPANS = 20_000;
function retainingProvider(processors) {
  const kept = new Array(RETAINED_SPANS);
  let next = 0;
  const keeper = {
    onStart() {},
    onEnd(span) {
      kept[next] = span;
      next = (next + 1) % RETAINED_SPANS;
    },
    forceFlush: async () => {},
    shutdown: async () => {},
  };
  return new BasicTracerProvider({ spanProcessors: [...processors, keeper] }).getTracer('bench');
}
const httpSpan = (tracer) => () => {
  const span = tracer.startSpan('GET', { kind: 2, attributes: HTTP_START_ATTRIBUTES }, deadlineCtx);
  span.setAttributes(HTTP_RESPONSE_ATTRIBUTES);
  span.end();
};
candidatesC.push(
  ['http-sized span, kept alive, without DeadlineSpanProcessor', httpSpan(retainingProvider([]))],
  ['http-sized span, kept alive, with DeadlineSpanProcessor', httpSpan(retainingProvider([new DeadlineSpanProcessor()]))],
);
const opsC = new Map(candidatesC.map(([name]) => [name, 50_000]));
for (const [, fn] of candidatesC) for (let i = 0; i < 10_000; i++) fn(i);
const timeC = sideBySide(candidatesC, opsC);

// ---- report
const ours = timeA.get(candidatesA[0][0]);
const oursArmed = timeA.get(candidatesA[1][0]);
const seed = timeA.get(candidatesA[2][0]);
const propRatio = timeB.get(candidatesB[0][0]) / timeB.get(candidatesB[1][0]);
writeResult('core', {
  title: 'Core',
  command: 'npm run bench',
  tables: [
    {
      caption: `(a) A child under a long-lived root: median of ${ROUNDS} alternating rounds; heap retained after 1,000,000 children and a full gc`,
      columns: ['case', 'ns / op:', 'heap retained:'],
      rows: candidatesA.map(([name]) => [name, fmt(timeA.get(name)), `${fmt(retainedA.get(name), 2)} MiB`]),
    },
    {
      caption: '(b) Propagator inject + extract',
      columns: ['case', 'ns / op:'],
      rows: candidatesB.map(([name]) => [name, fmt(timeB.get(name))]),
    },
    {
      caption: '(c) A span started and ended under a deadline',
      columns: ['case', 'ns / span:'],
      rows: candidatesC.map(([name]) => [name, fmt(timeC.get(name))]),
    },
    {
      caption: 'Ratios',
      columns: ['figure', 'value:', 'target'],
      rows: [
        ['seed style / open + dispose', `${fmt(seed / ours, 1)}×`, 'at least 20×'],
        ['seed style / open + signal + dispose', `${fmt(seed / oursArmed, 1)}×`, 'at least 20×'],
        ['DeadlinePropagator / W3CTraceContextPropagator', `${fmt(propRatio, 2)}×`, 'at most 3×'],
        ['added per empty span', `${fmt(timeC.get(candidatesC[1][0]) - timeC.get(candidatesC[0][0]))} ns`, ''],
        ['added per http-sized span kept alive', `${fmt(timeC.get(candidatesC[3][0]) - timeC.get(candidatesC[2][0]))} ns`, ''],
      ],
    },
  ],
  data: { timeA: Object.fromEntries(timeA), retainedMiB: Object.fromEntries(retainedA), timeB: Object.fromEntries(timeB), timeC: Object.fromEntries(timeC) },
});
root.dispose();
deadline.dispose();
