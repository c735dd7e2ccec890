import { InstrumentationNodeModuleDefinition, InstrumentationNodeModuleFile } from '@opentelemetry/instrumentation';
import type { ClientHost } from '../call/host';
import type { MethodPatch } from '../wrap';
import { type AnyFunction, type DbDriver, type Exports, makeOpensOutsideDeadline } from './driver-call';
import { DriverSpanSlot } from './driver-span';
import { patchIoredis } from './ioredis';
import { patchMysql2, patchMysql2Connection } from './mysql2';
import { patchMysql2Pool } from './mysql2-pool';
import { patchMysql2PoolConnection } from './mysql2-connection';
import { patchPg, patchPgClientFile } from './pg';

type Patcher = (exports: Exports, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean) => MethodPatch[];

/** A file inside a driver's package whose exports are patched (or, when it exports one function, replaced). */
interface DriverFile {
  path: string;
  patch?: Patcher;
  replace?: (original: AnyFunction) => AnyFunction;
}

/** The drivers and files inside them hooked too: where instrumentation-pg patches (pg.ts); `mysql2/promise` loads mysql2's classes without its main module. */
const DRIVERS: readonly { name: DbDriver; versions: string[]; patch: Patcher; files?: DriverFile[] }[] = [
  { name: 'pg', versions: ['>=8.0.0 <9'], patch: patchPg, files: [{ path: 'pg/lib/client.js', patch: patchPgClientFile }] },
  {
    name: 'mysql2',
    versions: ['>=3.0.0 <4'],
    patch: patchMysql2,
    files: [
      { path: 'mysql2/lib/connection.js', patch: patchMysql2Connection },
      { path: 'mysql2/lib/pool.js', patch: patchMysql2Pool },
      { path: 'mysql2/lib/pool_connection.js', patch: patchMysql2PoolConnection },
      // createConnection, as both the main module and `mysql2/promise` require it: the socket opens in the constructor.
      { path: 'mysql2/lib/create_connection.js', replace: makeOpensOutsideDeadline },
    ],
  },
  { name: 'ioredis', versions: ['>=5.0.0 <7'], patch: patchIoredis },
];

export const MYSQL2_INSTRUMENTATION_SCOPE = '@opentelemetry/instrumentation-mysql2';

export const DATABASE_MODULES: readonly string[] = DRIVERS.map((driver) => driver.name);

/** The database half of DeadlineInstrumentation: a module definition per driver switched on, and the span slots. */
export class DatabaseDrivers {
  readonly slots: Record<DbDriver, DriverSpanSlot>;
  private readonly patches = new Map<object, MethodPatch[]>();
  private readonly replacements = new WeakMap<object, AnyFunction>();

  constructor(
    private readonly owner: object,
    private readonly host: ClientHost,
    private readonly isActive: () => boolean,
  ) {
    this.slots = { pg: new DriverSpanSlot(isActive), mysql2: new DriverSpanSlot(isActive), ioredis: new DriverSpanSlot(isActive) };
  }

  definitions(enabled: (driver: DbDriver) => boolean): InstrumentationNodeModuleDefinition[] {
    const unpatch = (exports: Exports | undefined) => this.unpatch(exports);
    return DRIVERS.filter((driver) => enabled(driver.name)).map((driver) => {
      const slot = this.slots[driver.name];
      const files = (driver.files ?? []).map((file) => {
        const patch = (exports: Exports) => (file.replace === undefined ? this.patchOnce(exports, file.patch!, slot) : this.replaceOnce(exports, file.replace));
        return new InstrumentationNodeModuleFile(file.path, driver.versions, patch, unpatch);
      });
      return new InstrumentationNodeModuleDefinition(driver.name, driver.versions, (exports: Exports) => this.patchOnce(exports, driver.patch, slot), unpatch, files);
    });
  }

  private patchOnce(exports: Exports, patcher: Patcher, slot: DriverSpanSlot): Exports {
    if (!this.patches.has(exports)) this.patches.set(exports, patcher(exports, this.host, slot, this.owner, this.isActive));
    return exports;
  }

  /** A file whose export is the function itself: replaced for good, so disabled it calls the original straight through. */
  private replaceOnce(exports: unknown, makeWrapper: (original: AnyFunction) => AnyFunction): unknown {
    if (typeof exports !== 'function') return exports;
    const known = this.replacements.get(exports);
    if (known !== undefined) return known;
    const original = exports as AnyFunction;
    const active = makeWrapper(original);
    const isActive = this.isActive;
    const replacement = Object.assign(function (this: unknown, ...args: unknown[]): unknown {
      return isActive() ? active.apply(this, args) : original.apply(this, args);
    }, exports);
    this.replacements.set(exports, replacement);
    this.replacements.set(replacement, replacement);
    return replacement;
  }

  private unpatch(exports: Exports | undefined): void {
    if (exports === undefined) return;
    for (const patch of this.patches.get(exports) ?? []) patch.restore();
    this.patches.delete(exports);
  }
}
