import type { ClientHost } from '../call/host';
import { isShimmerWrapper, wrapMethod, type MethodPatch } from '../wrap';
import { type Exports, makeOpensOutsideDeadline } from './driver-call';
import type { DriverSpanSlot } from './driver-span';
import { makePgPoolConnectWrapper, makePgPoolQueryWrapper } from './pg-pool';
import { makePgQueryWrapper } from './pg-query';

/** The patches for one loaded `pg` (its CommonJS exports, or the ESM namespace whose classes are the same). */
export function patchPg(moduleExports: Exports, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean): MethodPatch[] {
  const exports = (moduleExports.Client === undefined && typeof moduleExports.default === 'object' ? moduleExports.default : moduleExports) as Exports;
  const pool = (exports.Pool as { prototype?: Exports } | undefined)?.prototype;
  const poolPatches =
    pool === undefined ? [] : [wrapMethod(pool, 'connect', owner, isActive, makePgPoolConnectWrapper(host)), wrapMethod(pool, 'query', owner, isActive, makePgPoolQueryWrapper)];
  return [...patchPgClient(exports.Client, host, slot, owner, isActive), ...poolPatches.filter((patch) => patch !== undefined)];
}

/** Client#query, and Client#connect: a connection opened under a deadline must not carry it (driver-call.ts). */
function patchPgClient(Client: unknown, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean): MethodPatch[] {
  const client = (Client as { prototype?: Exports } | undefined)?.prototype;
  if (client === undefined) return [];
  const patches = [wrapMethod(client, 'query', owner, isActive, makePgQueryWrapper(host, slot, owner)), wrapMethod(client, 'connect', owner, isActive, makeOpensOutsideDeadline)];
  return patches.filter((patch) => patch !== undefined);
}

/**
 * `pg/lib/client.js`: instrumentation-pg wraps `Client#query` here and again at the main module, unwrapping the first
 * only if still on top; we wrap here only if nobody has yet, so there is one instrumentation-pg span per statement.
 */
export function patchPgClientFile(Client: unknown, host: ClientHost, slot: DriverSpanSlot, owner: object, isActive: () => boolean): MethodPatch[] {
  const query = (Client as { prototype?: Exports } | undefined)?.prototype?.query;
  if (isShimmerWrapper(query)) return [];
  return patchPgClient(Client, host, slot, owner, isActive);
}
