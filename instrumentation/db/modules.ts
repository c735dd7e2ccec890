import { InstrumentationNodeModuleDefinition } from '@opentelemetry/instrumentation';
import type { ClientHost } from '../client/host';
import type { MethodPatch } from '../wrap';
import { DriverSpanSlot } from './driver-span';
import type { DbDriver } from './begin';
import { patchIoredis } from './ioredis';
import { patchMysql2 } from './mysql2';
import { patchPg } from './pg';

type Exports = Record<string, unknown>;
type Patcher = (exports: Exports, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean) => MethodPatch[];

/** The database drivers, the versions covered and the module names the ESM loader hook must include. */
const DRIVERS: readonly { name: DbDriver; versions: string[]; patch: Patcher }[] = [
  { name: 'pg', versions: ['>=8.0.0 <9'], patch: patchPg },
  { name: 'mysql2', versions: ['>=3.0.0 <4'], patch: patchMysql2 },
  { name: 'ioredis', versions: ['>=5.0.0 <7'], patch: patchIoredis },
];

export const DATABASE_MODULES: readonly string[] = DRIVERS.map((driver) => driver.name);

/**
 * The database half of DeadlineInstrumentation: one module definition per
 * driver that is switched on, and the `requestHook`s that hand the OTel
 * driver instrumentations' spans to our statements.
 */
export class DatabaseDrivers {
  readonly slots: Record<DbDriver, DriverSpanSlot> = { pg: new DriverSpanSlot(), mysql2: new DriverSpanSlot(), ioredis: new DriverSpanSlot() };
  private readonly patches = new Map<object, MethodPatch[]>();

  constructor(
    private readonly owner: object,
    private readonly host: ClientHost,
    private readonly isActive: () => boolean,
  ) {}

  definitions(enabled: (driver: DbDriver) => boolean): InstrumentationNodeModuleDefinition[] {
    return DRIVERS.filter((driver) => enabled(driver.name)).map(
      (driver) =>
        new InstrumentationNodeModuleDefinition(
          driver.name,
          driver.versions,
          (exports: Exports) => {
            if (!this.patches.has(exports)) this.patches.set(exports, driver.patch(exports, this.host, this.slots[driver.name], this.owner, this.isActive));
            return exports;
          },
          (exports: Exports | undefined) => {
            if (exports === undefined) return;
            for (const patch of this.patches.get(exports) ?? []) patch.restore();
            this.patches.delete(exports);
          },
        ),
    );
  }
}
