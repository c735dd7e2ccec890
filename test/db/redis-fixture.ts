/** Redis on 127.0.0.1:6379, as .ci/ensure-services.sh starts it. */
type Admin = { info(section: string): Promise<string> };

/** How many times the server ran `name` (INFO commandstats): a refused command never adds one. */
export async function commandCalls(admin: Admin, name: string): Promise<number> {
  const info = await admin.info('commandstats');
  const match = new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(info);
  return match === null ? 0 : Number(match[1]);
}

/** A Lua script that holds the server for 1 s, so a command sent behind it is in flight at a 200 ms cutoff. */
export const BUSY_1S =
  "local t = redis.call('TIME'); local s = t[1] * 1000000 + t[2]; repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - s >= 1000000; return 1";
