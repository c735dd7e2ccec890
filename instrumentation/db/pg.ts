import type { ClientHost } from '../client/host';
import { wrapMethod, type MethodPatch } from '../wrap';
import type { DriverSpanSlot } from './driver-span';
import { makePgPoolConnectWrapper, makePgPoolQueryWrapper } from './pg-pool';
import { makePgQueryWrapper } from './pg-query';

type Exports = Record<string, unknown>;

/** The patches for one loaded `pg` (its CommonJS exports, or the ESM namespace whose classes are the same). */
export function patchPg(moduleExports: Exports, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean): MethodPatch[] {
  const patches: MethodPatch[] = [];
  const add = (patch: MethodPatch | undefined) => patch !== undefined && patches.push(patch);
  const exports = (moduleExports.Client === undefined && typeof moduleExports.default === 'object' ? moduleExports.default : moduleExports) as Exports;
  const client = (exports.Client as { prototype?: Exports } | undefined)?.prototype;
  const pool = (exports.Pool as { prototype?: Exports } | undefined)?.prototype;
  if (client !== undefined) add(wrapMethod(client, 'query', owner, isActive, makePgQueryWrapper(host, slot, owner)));
  if (pool !== undefined) {
    add(wrapMethod(pool, 'connect', owner, isActive, makePgPoolConnectWrapper(host)));
    add(wrapMethod(pool, 'query', owner, isActive, makePgPoolQueryWrapper(host)));
  }
  return patches;
}
