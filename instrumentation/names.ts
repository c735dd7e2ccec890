import { DeadlineAttributes } from '../src/attributes';

/** Observe mode: the call or request would have been aborted at its cutoff or by a disconnect. */
export const ATTR_DEADLINE_WOULD_ABORT = DeadlineAttributes.WOULD_ABORT;
/** Observe mode: the call would have been refused, or the request rejected on arrival. */
export const ATTR_DEADLINE_WOULD_REJECT = DeadlineAttributes.WOULD_REJECT;
export { HEADER_DEADLINE_EXPIRED } from '../src/attributes';

/** The instrumentation scope name of DeadlineInstrumentation's own spans. */
export const INSTRUMENTATION_NAME = 'otel-deadline/instrumentation';
/**
 * The package's version, read from its own package.json through the package's
 * self-reference (its `exports` lists ./package.json), so the sources under test
 * and the built files in an installed copy both find the right file. An import
 * of the JSON would make tsc copy package.json into dist/.
 */
// eslint-disable-next-line @typescript-eslint/no-require-imports
export const INSTRUMENTATION_VERSION: string = (require('otel-deadline/package.json') as { version: string }).version;
