/**
 * A grpc-js channel target as a URL, for `propagateTo` and `trustReply`: `host:port`, `dns:host:port`,
 * `dns:///host:port`, `dns://resolver/host:port`, `ipv4:1.2.3.4:port[,...]` or `ipv6:[::1]:port`, the first
 * address standing for the target, as `https:` (gRPC's default port 443). `unix:` or anything else: undefined.
 */
const NAME_RESOLVERS = new Set(['dns', 'ipv4', 'ipv6']);

export function grpcTargetUrl(target: string): string | undefined {
  let address = target;
  const scheme = /^([a-z][a-z0-9+.-]*):(?!\d+$)/i.exec(target);
  if (scheme !== null) {
    if (!NAME_RESOLVERS.has(scheme[1].toLowerCase())) return undefined;
    address = target.slice(scheme[0].length);
    // dns://authority/host:port: the authority is the resolver, not the peer.
    if (address.startsWith('//')) address = address.slice(address.indexOf('/', 2) + 1);
  }
  const first = address.split(',')[0];
  try {
    return new URL(`https://${first}/`).href;
  } catch {
    return undefined;
  }
}
