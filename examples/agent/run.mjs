// Runs the example agent end to end on loopback and prints what happened:
//   node examples/agent/run.mjs            a roomy (3 s) and a tight (0.9 s) request
//   node examples/agent/run.mjs --budget 1200 --json
//   node examples/agent/run.mjs --budget 900 --queue-delay 1500   the report job expires in the queue
//   node examples/agent/run.mjs --budget 2000 --enrichment-min 2000 the enrichment can never fit
// Needs the package built (npm run build): it imports `otel-deadline`.
import { parseArgs } from 'node:util';
import { runAgentScenario, startAgentServices, startTracing } from './index.mjs';

const { values } = parseArgs({
  options: {
    json: { type: 'boolean' },
    budget: { type: 'string' },
    'queue-delay': { type: 'string' },
    'enrichment-min': { type: 'string' },
  },
});
const budgets = values.budget === undefined ? [3_000, 900] : [Number(values.budget)];
const queueDelayMs = values['queue-delay'] === undefined ? undefined : Number(values['queue-delay']);
const enrichmentMinMs = values['enrichment-min'] === undefined ? undefined : Number(values['enrichment-min']);
const nonNegative = (value) => value === undefined || value >= 0;
if (budgets.some((b) => !Number.isFinite(b) || b <= 0) || !nonNegative(queueDelayMs) || !nonNegative(enrichmentMinMs)) {
  console.error('--budget, --queue-delay and --enrichment-min take a positive number of milliseconds');
  process.exit(2);
}

const KIND = ['internal', 'server', 'client', 'producer', 'consumer'];

/** Ids, timings and deadline attributes only: what a trace backend would show. */
function summarize(span) {
  const attributes = Object.fromEntries(Object.entries(span.attributes).filter(([key]) => key.startsWith('deadline.')));
  return {
    name: span.name,
    kind: KIND[span.kind],
    traceId: span.spanContext().traceId,
    spanId: span.spanContext().spanId,
    parentSpanId: span.parentSpanContext?.spanId,
    links: span.links.map((l) => l.context.spanId),
    attributes,
    events: span.events.map((e) => ({ name: e.name, attributes: e.attributes })),
  };
}

function print(run) {
  const { answer, jobs, arrivals } = run;
  console.log(`\n== budget ${run.budgetMs} ms: ${answer.status} [${answer.parts.join(', ')}]${answer.skipped.length ? ` skipped: ${answer.skipped.join(', ')}` : ''}`);
  console.log(`   queued report: ${jobs.map((j) => j.status + (j.code ? ` (${j.code})` : '')).join(', ')}`);
  console.log(`   arrivals: ${Object.entries(arrivals).map(([name, n]) => `${name}=${n}`).join(' ')}`);
  for (const span of run.spans) {
    const a = span.attributes;
    const flags = a['deadline.violation'] ? `  LATE: ${a['deadline.violation']}` : '';
    console.log(
      `   ${span.name.padEnd(28)} ${String(span.kind).padEnd(8)} remaining ${String(a['deadline.remaining_ms'] ?? '-').padStart(5)} ms -> ${String(a['deadline.remaining_at_end_ms'] ?? '-').padStart(5)} ms  ${a['deadline.outcome'] ?? ''}${flags}`,
    );
  }
}

const tracing = startTracing();
const services = await startAgentServices({
  ...(queueDelayMs === undefined ? {} : { queueDelayMs }),
  ...(enrichmentMinMs === undefined ? {} : { enrichmentMinMs }),
});
const runs = [];
try {
  for (const budgetMs of budgets) {
    tracing.exporter.reset();
    const result = await runAgentScenario(services, { budgetMs });
    runs.push({ budgetMs, ...result, spans: tracing.spans().map(summarize) });
  }
} finally {
  await services.close();
  await tracing.shutdown();
}
if (values.json) console.log(JSON.stringify({ runs }));
else runs.forEach(print);
