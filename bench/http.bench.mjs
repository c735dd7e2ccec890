// npm run bench:http — the cost of the deadline plugin on a real HTTP chain.
//
// Two child processes each serve the same loopback 2-hop chain
// (bench/http-chain.mjs: front --undici--> back) under the OpenTelemetry Node
// SDK with the http and undici instrumentations, W3C propagators and a batch
// span processor with a no-op exporter. "with" adds the deadline propagator, span processor and
// DeadlineInstrumentation; "without" has none of them. Every request carries
// `x-deadline-remaining-ms`, so "with" does all its work (server admission,
// headers on the hop, the guarded undici call). autocannon (programmatic API)
// drives both from this process in alternating rounds of fixed length. The
// ratios are medians of per-round ratios: each round runs "with" right next to
// "without", so a shared machine that slows down for tens of seconds at a time
// slows both sides of a round alike, where the medians of each side alone would
// mix fast and slow periods. Those medians are printed too.
//
// A third child, "floor", runs bare stand-ins for the least work the deadline
// contract itself adds (bench/contract-floor.mjs): not the package, a
// reference for how close to "without" any implementation could get.
//
// Prints a Markdown section between <!-- bench:http --> markers.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { cpus } from 'node:os';
import { ALL_PARTS, startChain } from './http-chain.mjs';
import { fmt, median } from './stats.mjs';

const ROUNDS = Number(process.env.BENCH_HTTP_ROUNDS ?? 16);
const ROUND_SECONDS = Number(process.env.BENCH_HTTP_SECONDS ?? 2);
const CONNECTIONS = 16;
const WARMUP_SECONDS = 2;

/** Child: one chain, printing its front port as a JSON line once ready. */
async function serve(mode) {
  const port = await startChain(mode === 'with' ? ALL_PARTS : mode === 'floor' ? ['floor'] : []);
  process.stdout.write(`${JSON.stringify({ port })}\n`);
  // CPU time spent by this process, for a per-request figure that machine load does not skew.
  process.on('message', () => {
    const { user, system } = process.cpuUsage();
    process.send({ cpuUs: user + system });
  });
  process.once('disconnect', () => process.exit(0));
}

function startChild(mode) {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), '--serve', mode], {
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    createInterface({ input: child.stdout }).once('line', (line) => resolve({ child, port: JSON.parse(line).port }));
  });
}

function cpuUs(child) {
  return new Promise((resolve) => {
    child.once('message', (message) => resolve(message.cpuUs));
    child.send('cpu');
  });
}

async function load(autocannon, { child, port }, seconds) {
  const cpuBefore = await cpuUs(child);
  const result = await autocannon({
    url: `http://127.0.0.1:${port}/`,
    connections: CONNECTIONS,
    duration: seconds,
    headers: { 'x-deadline-remaining-ms': '5000' },
  });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${result.non2xx} non-2xx and ${result.errors} errors on port ${port}`);
  const cpuPerRequestUs = (await cpuUs(child) - cpuBefore) / result.requests.total;
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, cpuPerRequestUs };
}


async function drive() {
  const { default: autocannon } = await import('autocannon');
  const modes = ['without', 'with', 'floor'];
  const children = Object.fromEntries(await Promise.all(modes.map(async (mode) => [mode, await startChild(mode)])));
  try {
    for (const mode of modes) await load(autocannon, children[mode], WARMUP_SECONDS);
    const samples = { with: [], without: [], floor: [] };
    for (let round = 0; round < ROUNDS; round++) {
      // Rotate which goes first, so drift in machine load hits every mode alike.
      const order = modes.map((_, k) => modes[(k + round) % modes.length]);
      for (const mode of order) samples[mode].push(await load(autocannon, children[mode], ROUND_SECONDS));
    }
    const summary = Object.fromEntries(
      modes.map((mode) => [
        mode,
        {
          rps: median(samples[mode].map((s) => s.rps)),
          p50: median(samples[mode].map((s) => s.p50)),
          p99: median(samples[mode].map((s) => s.p99)),
          cpu: median(samples[mode].map((s) => s.cpuPerRequestUs)),
        },
      ]),
    );
    // Per round: "with" over "without", measured back to back.
    const paired = (pick, mode = 'with') => median(samples[mode].map((s, round) => pick(s) / pick(samples.without[round])));
    const throughputRatio = paired((s) => s.rps);
    const p99Ratio = paired((s) => s.p99);
    const cpuRatio = paired((s) => s.cpuPerRequestUs);
    const floorRatios = {
      rps: paired((s) => s.rps, 'floor'),
      p99: paired((s) => s.p99, 'floor'),
      cpu: paired((s) => s.cpuPerRequestUs, 'floor'),
    };
    const verdict = (ok) => (ok ? 'met' : 'NOT met');
    const lines = [
      '<!-- bench:http -->',
      '## HTTP chain: with vs without the deadline plugin (`npm run bench:http`)',
      '',
      `Loopback 2-hop chain (front → back over undici) under NodeSDK with instrumentation-http and -undici,`,
      `driven by autocannon with ${CONNECTIONS} connections; ${ROUNDS} rounds of ${ROUND_SECONDS} s per mode, the modes in rotating order,`,
      `after a ${WARMUP_SECONDS} s warm-up. The table gives each mode's median across rounds; the ratios are medians`,
      `of per-round ratios (each mode over without, run back to back), which machine slowdowns lasting several rounds skew less.`,
      `Node ${process.version}, ${cpus().length} CPUs.`,
      '',
      '| | req/s | p50 ms | p99 ms | server CPU µs / request |',
      '| --- | ---: | ---: | ---: | ---: |',
      `| without | ${fmt(summary.without.rps)} | ${fmt(summary.without.p50, 1)} | ${fmt(summary.without.p99, 1)} | ${fmt(summary.without.cpu)} |`,
      `| with | ${fmt(summary.with.rps)} | ${fmt(summary.with.p50, 1)} | ${fmt(summary.with.p99, 1)} | ${fmt(summary.with.cpu)} |`,
      `| contract floor (stand-ins, not the package) | ${fmt(summary.floor.rps)} | ${fmt(summary.floor.p50, 1)} | ${fmt(summary.floor.p99, 1)} | ${fmt(summary.floor.cpu)} |`,
      '',
      `Throughput ratio (with / without): **${fmt(throughputRatio, 3)}** (target ≥ 0.95: ${verdict(throughputRatio >= 0.95)}).`,
      `p99 latency ratio (with / without): **${fmt(p99Ratio, 3)}** (target ≤ 1.10: ${verdict(p99Ratio <= 1.1)}).`,
      `Server CPU per request (both hops, one process), with / without: **${fmt(cpuRatio, 3)}**`,
      '(not skewed by load from other processes, unlike req/s).',
      `The contract floor (bench/contract-floor.mjs: the least work the deadline contract adds, as bare stand-ins`,
      `without validation or abort handling) over without, same estimator: throughput **${fmt(floorRatios.rps, 3)}**,`,
      `p99 **${fmt(floorRatios.p99, 3)}**, CPU **${fmt(floorRatios.cpu, 3)}**.`,
      `Ratios of the medians instead: throughput ${fmt(summary.with.rps / summary.without.rps, 3)}, p99 ${fmt(summary.with.p99 / summary.without.p99, 3)}, CPU ${fmt(summary.with.cpu / summary.without.cpu, 3)}.`,
      '',
      `Per round, req/s without: ${samples.without.map((s) => fmt(s.rps)).join(', ')}; with: ${samples.with.map((s) => fmt(s.rps)).join(', ')}; floor: ${samples.floor.map((s) => fmt(s.rps)).join(', ')}.`,
      '<!-- /bench:http -->',
    ];
    console.log(lines.join('\n'));
  } finally {
    for (const { child } of Object.values(children)) child.disconnect();
  }
}

if (process.argv[2] === '--serve') await serve(process.argv[3]);
else await drive();
