// Types for start.mjs, so TypeScript tests can drive the demo.
import type { ChildProcess } from 'node:child_process';
import type { LineageSpan, OtlpReceiver } from '../../src/lineage/index';

export declare const SERVICE_NAMES: readonly string[];

export interface DemoService {
  name: string;
  child: ChildProcess;
  port: number;
  url: string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

export interface DemoAnswer {
  /** 200, or 504 when the request ran out of its budget. */
  status: number;
  traceId: string;
  answer?: string;
  steps?: Record<string, string>;
  code?: string;
}

export interface RunningDemo {
  /** Undefined when the spans went to `otlpEndpoint`. */
  receiver: OtlpReceiver | undefined;
  tracesFile: string | undefined;
  services: Record<string, DemoService>;
  ask(question?: string): Promise<DemoAnswer>;
  stop(): Promise<void>;
}

export declare function startDemo(options?: {
  outDir?: string;
  budgetMs?: number;
  telemetry?: 'self' | 'register';
  onSpans?: (spans: LineageSpan[]) => void;
  otlpEndpoint?: string;
}): Promise<RunningDemo>;
