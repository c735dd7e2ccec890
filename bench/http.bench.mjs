// npm run bench:http — the deadline plugin on the HTTP chain of
// bench/http-chain.mjs, in wall-clock time (information only: the target is
// judged in instructions, by bench:http:instructions).
//
// One child process per mode serves the chain: 'otel' (OpenTelemetry's http
// and undici tracing) and 'plugin' (the same plus the deadline plugin).
// autocannon drives both from this process with the chain's JSON POST, in
// alternating rounds of fixed length; each request carries
// `x-deadline-remaining-ms`, so the plugin does all its work. The ratios are
// medians of per-round ratios: a shared machine that slows down for a while
// slows both sides of a round alike.
//
// Writes bench/results/http.json.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { FRONT_BODY, startChain } from './http-chain.mjs';
import { writeResult } from './report.mjs';
import { fmt, median } from './stats.mjs';

const ROUNDS = Number(process.env.BENCH_HTTP_ROUNDS ?? 16);
const ROUND_SECONDS = Number(process.env.BENCH_HTTP_SECONDS ?? 2);
const CONNECTIONS = 16;
const WARMUP_SECONDS = 2;
const MODES = ['otel', 'plugin'];

/** Child: one chain, printing its front port as a JSON line once ready. */
async function serve(mode) {
  const { port } = await startChain(mode);
  process.stdout.write(`${JSON.stringify({ port })}\n`);
  // CPU time spent by this process, for a per-request figure that machine load does not skew.
  process.on('message', () => {
    const { user, system } = process.cpuUsage();
    process.send({ cpuUs: user + system });
  });
  process.once('disconnect', () => process.exit(0));
}

function startChild(mode) {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), '--serve', mode], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
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
    method: 'POST',
    body: FRONT_BODY,
    connections: CONNECTIONS,
    duration: seconds,
    headers: { 'content-type': 'application/json', 'x-deadline-remaining-ms': '5000' },
  });
  if (result.non2xx > 0 || result.errors > 0) throw new Error(`${result.non2xx} non-2xx and ${result.errors} errors on port ${port}`);
  const cpuPerRequestUs = ((await cpuUs(child)) - cpuBefore) / result.requests.total;
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, cpuPerRequestUs };
}

async function drive() {
  const { default: autocannon } = await import('autocannon');
  const children = Object.fromEntries(await Promise.all(MODES.map(async (mode) => [mode, await startChild(mode)])));
  try {
    for (const mode of MODES) await load(autocannon, children[mode], WARMUP_SECONDS);
    const samples = { otel: [], plugin: [] };
    for (let round = 0; round < ROUNDS; round++) {
      // Rotate which goes first, so drift in machine load hits both alike.
      const order = MODES.map((_, k) => MODES[(k + round) % MODES.length]);
      for (const mode of order) samples[mode].push(await load(autocannon, children[mode], ROUND_SECONDS));
    }
    const med = (mode, pick) => median(samples[mode].map(pick));
    const paired = (pick) => median(samples.plugin.map((s, round) => pick(s) / pick(samples.otel[round])));
    const row = (mode, name) => [name, fmt(med(mode, (s) => s.rps)), fmt(med(mode, (s) => s.p50), 1), fmt(med(mode, (s) => s.p99), 1), fmt(med(mode, (s) => s.cpuPerRequestUs))];
    writeResult('http', {
      title: 'HTTP chain in wall-clock time (information only)',
      command: 'npm run bench:http',
      tables: [
        {
          caption: `autocannon, ${CONNECTIONS} connections, ${ROUNDS} rounds of ${ROUND_SECONDS} s per mode in alternating order after ${WARMUP_SECONDS} s of warm-up; medians across rounds`,
          columns: ['mode', 'req/s:', 'p50 ms:', 'p99 ms:', 'server CPU µs / request:'],
          rows: [row('otel', 'OpenTelemetry http + undici tracing'), row('plugin', 'OpenTelemetry + the deadline plugin')],
        },
        {
          caption: 'With the plugin over without, medians of per-round ratios',
          columns: ['figure', 'ratio:'],
          rows: [
            ['throughput', fmt(paired((s) => s.rps), 3)],
            ['p99 latency', fmt(paired((s) => s.p99), 3)],
            ['server CPU per request (both hops, one process)', fmt(paired((s) => s.cpuPerRequestUs), 3)],
          ],
        },
      ],
      data: { rounds: ROUNDS, roundSeconds: ROUND_SECONDS, samples },
    });
  } finally {
    for (const { child } of Object.values(children)) child.disconnect();
  }
}

if (process.argv[2] === '--serve') await serve(process.argv[3]);
else await drive();
