// Vitest's stand-in for instrumentation/load-patchers.ts (see vitest.config.mts): the
// sources run as ES modules there, which cannot be required synchronously.
import * as patchers from '../../instrumentation/patchers';

export const loadPatchers = (): typeof patchers => patchers;
