// npm run bench:http:instructions / bench:db:instructions / bench:grpc:instructions
// (`node bench/instructions.bench.mjs http|db|grpc`): the plugin's cost in
// instructions, which a shared, loaded machine does not change, against what
// OpenTelemetry itself costs on the same workload. Every configuration is
// counted by the one harness (bench/callgrind.mjs) RUNS times, each in a
// process of its own, so that two runs of one build show how far they agree.
//
// - http: the chain of bench/http-chain.mjs (a JSON front making a fetch
//   POST, an undici.request GET and an http.request through a keep-alive
//   agent), bare Node, with OpenTelemetry's http and undici tracing, with the
//   plugin, and with the contract floor (bench/contract-floor.mjs) in the
//   plugin's place. Target: the plugin's added instructions at most 40 % of
//   OpenTelemetry's own added instructions.
// - db: PostgreSQL `SELECT 1` through a pg pool and Redis `GET` through
//   ioredis, 8 at a time (bench/db-workload.mjs), with the driver's OTel
//   instrumentation; the plugin with the database guards off and on, and the
//   contract floor without and with its per-statement part. Target: the guard
//   at most 5 % over the statement without it.
// - grpc: unary calls, 32 in flight (bench/grpc-workload.mjs), with
//   instrumentation-grpc; the whole plugin, and the contract floor
//   (bench/contract-floor.mjs). Target: the plugin's added instructions
//   at most 1.3 times the floor's.
//
// Figures are instructions per operation in the counted windows, with and
// without what V8 spent compiling optimized code (a one-off per process that
// grows with the amount of code on the path). Writes bench/results/KIND-instructions.json;
// `--merge FILE...` writes it from the runs of earlier such files instead of counting.
// Environment: BENCH_INSTR_RUNS (2), BENCH_INSTR_WARMUP, BENCH_INSTR_COUNT and
// BENCH_INSTR_WINDOWS (per kind, below), BENCH_INSTR_JOBS (one per core).
import { countAll } from './callgrind.mjs';
import { readFileSync } from 'node:fs';
import { environment, writeResult } from './report.mjs';
import { fmt } from './stats.mjs';

const KINDS = {
  http: {
    workload: './http-chain.mjs',
    unit: 'request',
    warmup: 3_000,
    count: 2_000,
    windows: 1,
    configs: [
      { config: 'bare', name: 'bare Node (no OpenTelemetry)' },
      { config: 'otel', name: 'OpenTelemetry http + undici tracing' },
      { config: 'plugin', name: 'OpenTelemetry + the deadline plugin' },
      { config: 'floor', name: 'OpenTelemetry + the contract floor (stand-ins, not the package)' },
    ],
    figures: (v) => {
      const otel = v.otel - v.bare;
      const plugin = v.plugin - v.otel;
      const floor = v.floor - v.otel;
      return [
        ["OpenTelemetry's own added (otel − bare)", fmt(otel)],
        ['the plugin added (plugin − otel)', fmt(plugin)],
        ["the plugin's added / OpenTelemetry's own added", pct(plugin / otel), 'at most 40 %', plugin / otel <= 0.4],
        ['the contract floor added (floor − otel)', fmt(floor)],
        ["the floor's added / OpenTelemetry's own added", pct(floor / otel)],
        ["the plugin's added / the floor's added", `${fmt(plugin / floor, 2)}×`],
      ];
    },
  },
  db: {
    workload: './db-workload.mjs',
    unit: 'statement',
    warmup: 20_000,
    count: 10_000,
    windows: 1,
    configs: ['pg-throughput', 'redis-throughput'].flatMap((workload) => [
      { config: `${workload}/none`, name: `${workload}: driver + its OTel instrumentation` },
      { config: `${workload}/guard-off`, name: `${workload}: + the plugin, database guard off` },
      { config: `${workload}/guard-on`, name: `${workload}: + the plugin, database guard on` },
      { config: `${workload}/floor-off`, name: `${workload}: + the contract floor, no per-statement part` },
      { config: `${workload}/floor-on`, name: `${workload}: + the contract floor, with its per-statement part` },
    ]),
    figures: (v) =>
      ['pg-throughput', 'redis-throughput'].flatMap((w) => {
        const guard = v[`${w}/guard-on`] - v[`${w}/guard-off`];
        const plugin = v[`${w}/guard-on`] - v[`${w}/none`];
        const floorGuard = v[`${w}/floor-on`] - v[`${w}/floor-off`];
        return [
          [`${w}: the guard (guard on − guard off)`, `${sign(guard)} (${pct(guard / v[`${w}/guard-off`], true)})`, 'at most +5 %', guard / v[`${w}/guard-off`] <= 0.05],
          [`${w}: the whole plugin (guard on − none)`, `${sign(plugin)} (${pct(plugin / v[`${w}/none`], true)})`],
          [`${w}: the floor's per-statement part (floor on − floor off)`, `${sign(floorGuard)} (${pct(floorGuard / v[`${w}/floor-off`], true)})`],
          [`${w}: the guard / the floor's per-statement part`, `${fmt(guard / floorGuard, 2)}×`],
        ];
      }),
  },
  grpc: {
    workload: './grpc-workload.mjs',
    unit: 'call',
    // After 3,000 calls V8 was still compiling optimized code in the counted window (about 65,000 instructions
    // per call, more with the plugin's code on the path); after 12,000 that is under 2 % of the figures.
    warmup: 12_000,
    // At 2,000 calls two runs of one build differed by 5 % on the floor (what a window catches of the
    // collector varies with timing, 32 calls in flight); at 6,000 each configuration's runs agree within 0.6 %.
    count: 6_000,
    windows: 1,
    configs: [
      { config: 'without', name: 'instrumentation-grpc, no plugin' },
      { config: 'with', name: 'the whole plugin' },
      { config: 'floor', name: 'contract floor (stand-ins, not the package)' },
    ],
    figures: (v) => {
      const plugin = v.with - v.without;
      const floor = v.floor - v.without;
      return [
        ['the plugin added (with − without)', fmt(plugin)],
        ['the contract floor added (floor − without)', fmt(floor)],
        ["the plugin's added / the floor's added", `${fmt(plugin / floor, 2)}×`, 'at most 1.3×', plugin / floor <= 1.3],
      ];
    },
  },
};

const pct = (x, signed = false) => `${signed && x >= 0 ? '+' : ''}${fmt(100 * x, 1)} %`;
const sign = (x) => `${x >= 0 ? '+' : '−'}${fmt(Math.abs(x))}`;
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
const envNumber = (name, fallback) => Number(process.env[name] ?? fallback);

/** Counts every configuration of `kind` RUNS times; resolves with the method and, per run, its figures. */
async function count(kind) {
  const runs = envNumber('BENCH_INSTR_RUNS', 2);
  const method = {
    warmup: envNumber('BENCH_INSTR_WARMUP', kind.warmup),
    count: envNumber('BENCH_INSTR_COUNT', kind.count),
    windows: envNumber('BENCH_INSTR_WINDOWS', kind.windows),
  };
  // Run-major order: the first run of every configuration comes before any second run.
  const jobs = Array.from({ length: runs }, (_, run) => kind.configs.map(({ config }) => ({ run, config, workload: kind.workload, ...method }))).flat();
  const counted = await countAll(jobs);
  const { date, commit } = environment();
  // Per run and configuration: the windows' mean, all instructions and without optimizing compilation.
  const perRun = Array.from({ length: runs }, () => ({ date, commit, all: {}, executed: {}, windows: {} }));
  jobs.forEach(({ run, config }, i) => {
    perRun[run].all[config] = mean(counted[i].map((w) => w.total));
    perRun[run].executed[config] = mean(counted[i].map((w) => w.total - w.compile));
    perRun[run].windows[config] = counted[i];
  });
  return { ...method, runs: perRun };
}

/**
 * `--merge FILE...`: the runs of earlier results of this kind (bench/results/KIND-instructions.json
 * files), counted with the same method, as one result; the machine is the first file's.
 */
function merge(files) {
  const results = files.map((file) => JSON.parse(readFileSync(file, 'utf8')));
  const [first] = results;
  for (const { data } of results) {
    if (data.warmup !== first.data.warmup || data.count !== first.data.count || data.windows !== first.data.windows) {
      throw new Error('--merge: the results were counted with different methods');
    }
  }
  const runs = results.flatMap(({ data, environment: e }) => data.runs.map((run) => ({ date: e.date, commit: e.commit, ...run })));
  return { measuredOn: first.environment, data: { ...first.data, runs } };
}

function render(kindName, kind, data, measuredOn) {
  const { warmup, count: perWindow, windows, runs: perRun } = data;
  const runColumns = perRun.map((_, r) => `run ${r + 1}:`);
  const measured = (key) => ({
    caption: `Instructions per ${kind.unit}, ${key === 'all' ? 'all of them' : "without V8's optimizing compilation"}`,
    columns: ['configuration', ...runColumns],
    rows: kind.configs.map(({ config, name }) => [name, ...perRun.map((r) => fmt(r[key][config]))]),
  });
  const verdicts = (key) => {
    const byRun = perRun.map((r) => kind.figures(r[key]));
    return {
      caption: `Against the target, ${key === 'all' ? 'all instructions' : "without V8's optimizing compilation"}`,
      columns: ['figure', ...runColumns, 'target', 'met'],
      rows: byRun[0].map(([label, , target], row) => [
        label,
        ...byRun.map((figures) => figures[row][1]),
        target ?? '',
        target === undefined ? '' : byRun.every((figures) => figures[row][3]) ? 'yes' : byRun.some((figures) => figures[row][3]) ? 'in some runs' : 'no',
      ]),
    };
  };
  writeResult(`${kindName}:instructions`, {
    title: `${kindName === 'http' ? 'HTTP chain' : kindName === 'db' ? 'Database statements' : 'gRPC unary calls'} in instructions`,
    command: `npm run bench:${kindName}:instructions`,
    tables: [
      {
        caption: 'Method',
        columns: ['setting', 'value'],
        rows: [
          ['counted by', "valgrind --tool=callgrind (bench/callgrind.mjs), user-space instructions of the workload's process"],
          ['warm-up (not counted)', `${fmt(warmup)} ${kind.unit}s`],
          ['counted', `${windows} window(s) of ${fmt(perWindow)} ${kind.unit}s, per-${kind.unit} mean`],
          ...perRun.map((r, i) => [`run ${i + 1}`, `one process per configuration, started ${r.date ?? measuredOn?.date}, commit ${r.commit ?? measuredOn?.commit}`]),
        ],
      },
      measured('all'),
      verdicts('all'),
      measured('executed'),
      verdicts('executed'),
    ],
    data,
    ...(measuredOn ? { measuredOn } : {}),
  });
}

async function main([kindName, option, ...files]) {
  const kind = KINDS[kindName];
  if (kind === undefined) throw new Error(`usage: node bench/instructions.bench.mjs ${Object.keys(KINDS).join('|')} [--merge FILE...]`);
  if (option === '--merge') {
    const { data, measuredOn } = merge(files);
    render(kindName, kind, data, measuredOn);
  } else render(kindName, kind, await count(kind));
}

await main(process.argv.slice(2));
