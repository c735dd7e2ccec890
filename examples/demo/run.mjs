// `npm run demo`: four services on loopback, one request with a 1.5 s budget,
// then its deadline lineage as a tree and as a timeline page. No Docker.
import { writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildTree, loadTraces, renderHtml, renderText } from '../../dist/cjs/src/lineage/index.js';
import { startDemo } from './start.mjs';
import { hopLine } from './report.mjs';
import { traceFromJaeger } from './from-jaeger.mjs';

/**
 * Runs the whole demo and returns what it found. `print` receives every line
 * of output; the page and the OTLP/JSON file are written to `outDir`.
 * With `jaeger` (DEMO_OTLP_ENDPOINT and DEMO_JAEGER_URL, as `npm run jaeger`
 * prints them) the services export to Jaeger and the lineage is read back
 * from its query API.
 */
export async function runDemo({
  outDir = process.cwd(),
  budgetMs = Number(process.env.DEMO_BUDGET_MS ?? 1_500),
  print = console.log,
  jaeger = jaegerFromEnv(),
} = {}) {
  if (jaeger !== undefined) {
    print(`Starting gateway, agent, tools and worker on 127.0.0.1 (spans go to Jaeger at ${jaeger.otlpEndpoint})…`);
  } else {
    print(`Starting gateway, agent, tools and worker on 127.0.0.1 (spans go to an embedded OTLP/JSON receiver)…`);
  }
  const demo = await startDemo({
    outDir,
    budgetMs,
    otlpEndpoint: jaeger?.otlpEndpoint,
    onSpans: (spans) => {
      for (const span of spans) {
        const line = hopLine(span);
        if (line !== undefined) print(line);
      }
    },
  });
  let answer;
  try {
    print(`Asking the gateway, which gives the request a ${budgetMs} ms deadline. Hops as they finish:`);
    answer = await demo.ask();
  } finally {
    await demo.stop();
  }
  if (answer.status === 200) {
    print(`\nAnswer: ${answer.answer} (${Object.entries(answer.steps).map(([k, v]) => `${k}: ${v}`).join(', ')})\n`);
  } else {
    // A machine too busy for the budget: the lineage below shows where the time went.
    print(`\nNo answer: the gateway replied HTTP ${answer.status} ${answer.code ?? ''} (the request ran out of its budget)\n`);
  }

  const traces =
    jaeger === undefined
      ? await loadTraces(demo.tracesFile, { traceId: answer.traceId })
      : await traceFromJaeger(jaeger.queryUrl, answer.traceId);
  const trees = traces.map(buildTree);
  print(trees.map(renderText).join('\n\n'));
  const htmlFile = join(outDir, 'demo-lineage.html');
  writeFileSync(htmlFile, renderHtml(trees, 'Deadline lineage: npm run demo'));
  const shown = (file) => relative(process.cwd(), file) || file;
  print(`\nTimeline: ${pathToFileURL(htmlFile).href}`);
  // The package's own bin: npx finds it inside this clone (npm run demo runs from its root).
  const cli = 'npx deadline-lineage';
  if (jaeger === undefined) {
    print(`Spans (OTLP/JSON lines): ${shown(demo.tracesFile)}`);
    print(`Again from the file: ${cli} ${shown(demo.tracesFile)} --trace ${answer.traceId} --fail-on-violation`);
  } else {
    print(`Read from Jaeger: ${jaeger.queryUrl}/api/traces/${answer.traceId}`);
    print(`Again from Jaeger: ${cli} ${jaeger.queryUrl} --trace ${answer.traceId}`);
    print(`Search for lateness: ${cli} ${jaeger.queryUrl} --service agent`);
  }
  return { answer, trees, htmlFile, tracesFile: demo.tracesFile };
}

/** DEMO_OTLP_ENDPOINT and DEMO_JAEGER_URL go together: where spans go, and where they are read back. */
function jaegerFromEnv() {
  const otlpEndpoint = process.env.DEMO_OTLP_ENDPOINT;
  const queryUrl = process.env.DEMO_JAEGER_URL;
  if (otlpEndpoint === undefined && queryUrl === undefined) return undefined;
  if (!otlpEndpoint || !queryUrl) {
    throw new Error('set both DEMO_OTLP_ENDPOINT (Jaeger\'s OTLP/HTTP) and DEMO_JAEGER_URL (its query API), as `npm run jaeger` prints them');
  }
  return { otlpEndpoint, queryUrl };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  runDemo().catch((err) => {
    console.error(`demo failed: ${err?.message ?? err}`);
    process.exitCode = 1;
  });
}
