/**
 * The set-up the mysql2 test files share: the real OTel SDK with an
 * in-memory exporter, DeadlineInstrumentation registered before mysql2 is
 * loaded (as an application does), an admin connection that counts on the
 * server, and per-test clean-ups run in reverse order.
 */
import { createRequire } from 'node:module';
import { registerInstrumentations } from '@opentelemetry/instrumentation';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { DeadlineInstrumentation } from '../../src';
import { installOtel, type TestOtel } from '../helpers/otel';
import { createMysqlLog, MYSQL_CONFIG } from './mysql-fixture';

export interface MysqlSuite {
  otel: TestOtel;
  instrumentation: DeadlineInstrumentation;
  mysql: typeof import('mysql2');
  mysqlPromise: typeof import('mysql2/promise');
  admin: import('mysql2/promise').Connection;
  /** Run after the current test, last added first. */
  cleanups: (() => Promise<unknown> | void)[];
  /** The spans of mysql statements (ours or instrumentation-mysql2's). */
  mysqlSpans(): ReturnType<TestOtel['spans']>;
}

/** Registers the suite's hooks in the calling test file; the fields are set once its beforeAll has run. */
export function mysqlSuite(): MysqlSuite {
  const suite = {
    cleanups: [],
    mysqlSpans: () => suite.otel.spans().filter((s) => s.attributes['db.system.name'] === 'mysql'),
  } as unknown as MysqlSuite;
  beforeAll(async () => {
    suite.otel = installOtel();
    suite.instrumentation = new DeadlineInstrumentation();
    registerInstrumentations({ instrumentations: [suite.instrumentation] });
    const require = createRequire(import.meta.url);
    suite.mysql = require('mysql2');
    suite.mysqlPromise = require('mysql2/promise');
    suite.admin = await suite.mysqlPromise.createConnection(MYSQL_CONFIG);
    await createMysqlLog(suite.admin);
  });
  afterAll(async () => {
    await suite.admin?.end();
    suite.instrumentation.disable();
    await suite.otel.shutdown();
  });
  afterEach(async () => {
    for (const cleanup of suite.cleanups.splice(0).reverse()) await cleanup();
    suite.otel.exporter.reset();
  });
  return suite;
}
