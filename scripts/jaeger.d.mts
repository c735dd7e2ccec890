// Types for jaeger.mjs, so TypeScript tests can start Jaeger.
import type { ChildProcess } from 'node:child_process';

export declare const JAEGER_CONFIG: string;
export declare const DEFAULT_PORTS: Readonly<Record<JaegerPortName, number>>;
export type JaegerPortName = 'otlpGrpc' | 'otlpHttp' | 'queryHttp' | 'queryGrpc' | 'spanMetrics';

export interface RunningJaeger {
  urls: { query: string; otlpHttp: string; otlpGrpc: string; spanMetrics: string };
  ports: Record<JaegerPortName, number>;
  child: ChildProcess;
  stop(): Promise<void>;
  /** The last 8 KB of Jaeger's log. */
  log(): string;
}

export declare function jaegerVersion(): string;
export declare function jaegerBinary(): string;
export declare function freePort(): Promise<number>;
export declare function freePorts(count: number): Promise<number[]>;
export declare function startJaeger(options?: {
  ports?: 'free' | 'default';
  overlays?: string[];
  spanMetricsFlush?: string;
  quiet?: boolean;
}): Promise<RunningJaeger>;
export declare function servesPlaceholderUi(queryUrl: string): Promise<boolean>;
