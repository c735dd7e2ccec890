/**
 * The register entry's trace exporters, chosen by OTEL_TRACES_EXPORTER and
 * OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL as NodeSDK chooses them when given no
 * span processor. The entry gives NodeSDK one (the deadline processor), so
 * NodeSDK skips its own choice; it is made here instead, with the packages of
 * that very sdk-node install. Each exporter reads its own OTEL_EXPORTER_OTLP_*
 * settings. Metrics and logs are left to NodeSDK.
 */
import { createRequire } from 'node:module';
import { getNumberFromEnv, getStringFromEnv, getStringListFromEnv } from '@opentelemetry/core';
import type { SdkSpanProcessor } from '../src/processor/sdk-types';

/** A span exporter of either SDK line, kept opaque: only the SDK's processors call it. */
export type SpanExporterLike = object;

/** Loads a package as sdk-node's own require would; throws when it is not installed. */
type PackageLoader = (name: string) => Record<string, unknown>;

interface ChosenExporter {
  /** `otlp (http/protobuf)`, `console`, ...: what the dropped-spans line names. */
  label: string;
  exporter: SpanExporterLike;
}

/** Thrown for a choice whose package is not installed; its message is the one line printed. */
export class MissingExporterError extends Error {
  constructor(variable: string, value: string, pkg: string) {
    super(`otel-deadline/register: ${variable}=${value} needs ${pkg}, which is not installed. Install with: npm install ${pkg}`);
    this.name = 'MissingExporterError';
  }
}

const OTLP_PACKAGES: Record<string, string> = {
  'http/protobuf': '@opentelemetry/exporter-trace-otlp-proto',
  'http/json': '@opentelemetry/exporter-trace-otlp-http',
  grpc: '@opentelemetry/exporter-trace-otlp-grpc',
};

/** The OTEL_BSP_* variables, as sdk-trace-base applies them on the 2.x line. */
const BATCH_ENV: [option: string, variable: string][] = [
  ['maxExportBatchSize', 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE'],
  ['maxQueueSize', 'OTEL_BSP_MAX_QUEUE_SIZE'],
  ['scheduledDelayMillis', 'OTEL_BSP_SCHEDULE_DELAY'],
  ['exportTimeoutMillis', 'OTEL_BSP_EXPORT_TIMEOUT'],
];

function construct<T = SpanExporterLike>(load: PackageLoader, pkg: string, className: string, options?: object): T {
  const Class = load(pkg)[className] as new (options?: object) => T;
  return new Class(options);
}

function otlpExporter(load: PackageLoader, warn: (line: string) => void): ChosenExporter {
  const fromTraces = getStringFromEnv('OTEL_EXPORTER_OTLP_TRACES_PROTOCOL');
  const variable = fromTraces === undefined ? 'OTEL_EXPORTER_OTLP_PROTOCOL' : 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL';
  let protocol = fromTraces ?? getStringFromEnv('OTEL_EXPORTER_OTLP_PROTOCOL') ?? 'http/protobuf';
  if (OTLP_PACKAGES[protocol] === undefined) {
    warn(`otel-deadline/register: ${variable}=${protocol} is not an OTLP protocol (http/protobuf, http/json, grpc); using http/protobuf`);
    protocol = 'http/protobuf';
  }
  const pkg = OTLP_PACKAGES[protocol];
  try {
    return { label: `otlp (${protocol})`, exporter: construct(load, pkg, 'OTLPTraceExporter') };
  } catch (error) {
    if ((error as { code?: unknown }).code === 'MODULE_NOT_FOUND') throw new MissingExporterError(variable, protocol, pkg);
    throw error;
  }
}

/**
 * The exporters OTEL_TRACES_EXPORTER names: `otlp` (the default), `console`,
 * `zipkin`, a comma list of them, or `none`. As in NodeSDK, `none` first means
 * none, `none` after other names means the default; an unknown name is
 * skipped, here with one line on `warn`.
 */
export function traceExportersFromEnv(load: PackageLoader, warn: (line: string) => void): ChosenExporter[] {
  let names = [...new Set(getStringListFromEnv('OTEL_TRACES_EXPORTER') ?? [])].filter((name) => name !== 'null');
  if (names[0] === 'none') return [];
  if (names.length === 0 || names.includes('none')) names = ['otlp'];
  const chosen: ChosenExporter[] = [];
  for (const name of names) {
    if (name === 'otlp') chosen.push(otlpExporter(load, warn));
    else if (name === 'console') chosen.push({ label: 'console', exporter: construct(load, '@opentelemetry/sdk-trace', 'ConsoleSpanExporter') });
    else if (name === 'zipkin') chosen.push({ label: 'zipkin', exporter: construct(load, '@opentelemetry/exporter-zipkin', 'ZipkinExporter') });
    else warn(`otel-deadline/register: OTEL_TRACES_EXPORTER names "${name.slice(0, 64)}", which is not otlp, console, zipkin or none; skipped`);
  }
  return chosen;
}

/**
 * The span processor NodeSDK gives each exporter: simple for the console,
 * batched (OTEL_BSP_*) for the others. Both come from `@opentelemetry/sdk-trace`
 * next to sdk-node, which takes `{ exporter }` on the 2.x and the 3.x line.
 */
export function processorFor(load: PackageLoader, chosen: ChosenExporter): SdkSpanProcessor {
  if (chosen.label === 'console') return construct(load, '@opentelemetry/sdk-trace', 'SimpleSpanProcessor', { exporter: chosen.exporter });
  const options: Record<string, unknown> = { exporter: chosen.exporter };
  for (const [option, variable] of BATCH_ENV) {
    const value = getNumberFromEnv(variable);
    if (value !== undefined) options[option] = value;
  }
  return construct(load, '@opentelemetry/sdk-trace', 'BatchSpanProcessor', options);
}

/** Requires packages from where sdk-node is installed, so they are the copies NodeSDK would use. */
export function loadFromSdkNode(): PackageLoader {
  const fromSdkNode = createRequire(require.resolve('@opentelemetry/sdk-node'));
  return (name) => fromSdkNode(name) as Record<string, unknown>;
}
