import type * as patchers from './patchers';

export type Patchers = typeof patchers;

/**
 * The transport patchers, loaded when the first DeadlineInstrumentation is made,
 * not by `require('otel-deadline')`. Vitest cannot require the TypeScript sources:
 * vitest.config.mts points this module at test/helpers/load-patchers.ts.
 */
// eslint-disable-next-line @typescript-eslint/no-require-imports
export const loadPatchers = (): Patchers => require('./patchers') as Patchers;
