import type * as patchers from './patchers';

export type Patchers = typeof patchers;

/**
 * The transport patchers (client/, db/, grpc/, server/), loaded on first call:
 * `require('otel-deadline')` loads none of them until a DeadlineInstrumentation
 * is made. (Vitest runs the sources and cannot load a module synchronously:
 * vitest.config.mts points this module at test/helpers/load-patchers.ts, which
 * imports them up front.)
 */
// eslint-disable-next-line @typescript-eslint/no-require-imports
export const loadPatchers = (): Patchers => require('./patchers') as Patchers;
