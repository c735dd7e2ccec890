import http from 'node:http';
import https from 'node:https';
import { createRequire, syncBuiltinESMExports } from 'node:module';
import { join } from 'node:path';
import { context, type Span } from '@opentelemetry/api';
import { InstrumentationBase, InstrumentationNodeModuleDefinition } from '@opentelemetry/instrumentation';
import { DeadlinePropagator } from '../src/propagation/DeadlinePropagator';
import { onSpanStartedUnderDeadline } from '../src/processor/started-spans';
import { resolveConfig, type ResolvedConfig } from './config';
import type { OutgoingCall } from './client/call';
import type { DatabaseDrivers } from './db/modules';
import { outgoingCallIn } from './call/wire-context';
import { loadPatchers, type Patchers } from './load-patchers';
import { INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION } from './names';
import type { DeadlineInstrumentationConfig } from './types';
import { wrapMethod, type MethodPatch } from './wrap';
import type { ClientHost } from './call/host';
import type { ServerHost } from './server/admission';

type Exports = Record<string, unknown>;

/** What every wrapper reads on each call: the instrumentation's current config, tracer and switches. */
type WrapperHost = ClientHost & ServerHost & { readonly grpcEnabled: boolean };

const UNDICI_APIS = ['request', 'stream', 'pipeline'] as const;

/** The call object of the context a transport hook runs in. */
function activeCall(): OutgoingCall | undefined {
  const value = outgoingCallIn(context.active());
  return typeof value === 'object' && value !== null ? (value as OutgoingCall) : undefined;
}

/** Loaded when the first instrumentation is made. */
let patchers: Patchers;

/**
 * Carries the active deadline into every outgoing call (global fetch, undici,
 * node:http/https, the database drivers, grpc-js) and gives every incoming
 * request the deadline its caller sent. Register it like any OpenTelemetry
 * instrumentation, next to the DeadlinePropagator and DeadlineSpanProcessor.
 */
export class DeadlineInstrumentation extends InstrumentationBase<DeadlineInstrumentationConfig> {
  // `declare`: InstrumentationBase calls setConfig and enable from its constructor, before field initializers run.
  declare private resolved: ResolvedConfig;
  declare private propagatorForServer: DeadlinePropagator;
  declare private patches: MethodPatch[] | undefined;
  declare private undiciPatches: Map<object, MethodPatch[]> | undefined;
  declare private unsubscribes: (() => void)[] | undefined;
  declare private drivers: DatabaseDrivers;
  declare private grpcPatches: Map<object, MethodPatch[]> | undefined;
  declare private wrapperHost: WrapperHost | undefined;
  declare private httpServerHost: WrapperHost | undefined;

  constructor(config: DeadlineInstrumentationConfig = {}) {
    // Before super(), which makes OTel's require-in-the-middle hook if no instrumentation has yet:
    // a builtin (node:http) first required through that hook is cached unpatched for an
    // instrumentation registered after it (HttpInstrumentation, when the entry passes it our hooks).
    patchers ??= loadPatchers();
    super(INSTRUMENTATION_NAME, INSTRUMENTATION_VERSION, config);
  }

  private host(): WrapperHost {
    return (this.wrapperHost ??= this.makeHost(() => this.isEnabled()));
  }

  /** The host of node:http(s) servers: off while `httpServer` is false. */
  private serverHost(): WrapperHost {
    return (this.httpServerHost ??= this.makeHost(() => this.isEnabled() && this.resolved.httpServer));
  }

  /** Getters: setConfig and setTracerProvider replace what the wrappers read. */
  private makeHost(isEnabled: () => boolean): WrapperHost {
    const self = () => this;
    return {
      get settings() { return self().resolved; },
      get serverPropagator() { return self().propagatorForServer; },
      get tracer() { return self().tracer; },
      get grpcEnabled() { return self().resolved.grpc; },
      isEnabled,
    };
  }

  /** Wraps `target[name]`; the wrapper passes calls straight through while the instrumentation is disabled. */
  private wrap(target: Exports, name: string, makeWrapper: Parameters<typeof wrapMethod>[4]): MethodPatch[] {
    const patch = wrapMethod(target, name, this, () => this.isEnabled(), makeWrapper);
    return patch === undefined ? [] : [patch];
  }

  override setConfig(config: DeadlineInstrumentationConfig = {}): void {
    const resolved = resolveConfig(config);
    super.setConfig(config);
    this.resolved = resolved;
    this.propagatorForServer = new DeadlinePropagator({ maxIncomingMs: resolved.maxIncomingMs, operation: 'http.server' });
  }

  /**
   * Pass as `requestHook` to HttpInstrumentation: the outcome of a call (`expired`, `unknown`, `not_started`)
   * lands on its client span whatever the registration order. Without it the span processor still derives
   * `expired` / `completed` from the deadline.
   */
  readonly httpRequestHook = (span: Span, request: object): void => {
    // instrumentation-http calls it for incoming requests too, with their server span: no outgoing call is made there.
    if (request instanceof http.IncomingMessage) return;
    activeCall()?.addSpan(span);
  };

  /** Pass as `requestHook` to UndiciInstrumentation, for the same reason as httpRequestHook. */
  readonly undiciRequestHook = (span: Span): void => {
    activeCall()?.addSpan(span);
  };

  /**
   * Pass as `requestHook` to PgInstrumentation, for the same reason as httpRequestHook. From a hook of
   * your own, pass its second argument too: the query text there ties the span to its statement.
   */
  readonly pgRequestHook = (span: Span, info?: { query?: { text?: unknown } }): void => this.drivers.slots.pg.hook(span, info?.query?.text);
  /** Pass as `requestHook` to IORedisInstrumentation, for the same reason as pgRequestHook (its `cmdArgs` tie the span to its command). */
  readonly ioredisRequestHook = (span: Span, info?: { cmdArgs?: unknown }): void => this.drivers.slots.ioredis.hook(span, info?.cmdArgs);

  protected init(): InstrumentationNodeModuleDefinition[] {
    this.drivers ??= new patchers.DatabaseDrivers(this, this.host(), () => this.isEnabled());
    const modules = [
      ...this.drivers.definitions((driver) => this.resolved[driver]),
      new InstrumentationNodeModuleDefinition(
        'undici',
        ['>=6.0.0 <8'],
        (exports: Exports) => this.patchUndici(exports),
        (exports: Exports | undefined) => unpatch(this.undiciPatches, exports),
      ),
    ];
    // `grpc: false` leaves grpc-js alone: not even its module hook is set up.
    if (this.resolved.grpc) {
      modules.push(
        new InstrumentationNodeModuleDefinition(
          '@grpc/grpc-js',
          patchers.GRPC_JS_VERSIONS,
          (exports: Exports) => this.patchGrpc(exports),
          (exports: Exports | undefined) => unpatch(this.grpcPatches, exports),
        ),
      );
    }
    return modules;
  }

  override enable(): void {
    super.enable();
    if (this.patches !== undefined) return;
    const host = this.host();
    const patches: MethodPatch[] = [];
    for (const [module, protocol] of [[http, 'http:'], [https, 'https:']] as const) {
      const exports = module as unknown as Exports;
      patches.push(
        ...this.wrap(exports, 'request', patchers.makeHttpWrapper(host, protocol, false)),
        ...this.wrap(exports, 'get', patchers.makeHttpWrapper(host, protocol, true)),
        ...patchers.patchServerPrototype(this.serverHost(), this, (exports.Server as { prototype: Exports }).prototype),
      );
    }
    // ESM named imports of builtins (`import { request } from 'node:http'`) follow the CJS exports after this.
    syncBuiltinESMExports();
    // Global fetch is undefined under `node --no-experimental-fetch`: wrapMethod then patches nothing.
    patches.push(...this.wrap(globalThis as unknown as Exports, 'fetch', patchers.makeFetchWrapper(host, 'fetch') as never));
    this.patches = patches;
    this.unsubscribes = [
      patchers.subscribeUndiciChannels(() => this.resolved),
      // instrumentation-mysql2 has no requestHook: its spans reach us through DeadlineSpanProcessor.
      onSpanStartedUnderDeadline(patchers.MYSQL2_INSTRUMENTATION_SCOPE, this.drivers.slots.mysql2.hook),
    ];
    this.patchLoadedUndici();
  }

  override disable(): void {
    super.disable();
    for (const patch of this.patches ?? []) patch.restore();
    this.patches = undefined;
    for (const exports of [...(this.undiciPatches?.keys() ?? [])]) unpatch(this.undiciPatches, exports);
    syncBuiltinESMExports();
    for (const unsubscribe of this.unsubscribes ?? []) unsubscribe();
    this.unsubscribes = undefined;
  }

  /** undici may have been required before we were enabled; the module hook only sees later loads. */
  private patchLoadedUndici(): void {
    try {
      // Resolved from the application's directory: that is the copy it loads.
      const appRequire = createRequire(join(process.cwd(), 'index.js'));
      const loaded = appRequire.cache[appRequire.resolve('undici')];
      if (loaded?.loaded === true) this.patchUndici(loaded.exports as Exports);
    } catch {
      // undici is not installed where we can see it: nothing loaded to patch.
    }
  }

  private patchUndici(moduleExports: Exports): Exports {
    return patchOnce((this.undiciPatches ??= new Map()), moduleExports, () => {
      const host = this.host();
      // import-in-the-middle hands us the ESM namespace; its `default` is the CommonJS exports.
      const isNamespace = (moduleExports as { [Symbol.toStringTag]?: unknown })[Symbol.toStringTag] === 'Module';
      const targets = isNamespace && typeof moduleExports.default === 'object' ? [moduleExports, moduleExports.default as Exports] : [moduleExports];
      const dispatcher = (targets[targets.length - 1].Dispatcher as { prototype?: Exports } | undefined)?.prototype;
      return [
        ...targets.flatMap((target) => [
          ...UNDICI_APIS.flatMap((api) => this.wrap(target, api, patchers.makeUndiciWrapper(host, api, true))),
          ...this.wrap(target, 'fetch', patchers.makeFetchWrapper(host, 'undici') as never),
        ]),
        ...(dispatcher === undefined ? [] : UNDICI_APIS.flatMap((api) => this.wrap(dispatcher, api, patchers.makeUndiciWrapper(host, api, false)))),
      ];
    });
  }

  private patchGrpc(moduleExports: Exports): Exports {
    return patchOnce((this.grpcPatches ??= new Map()), moduleExports, () =>
      patchers.patchGrpcJs(this.host(), this, () => this.isEnabled(), moduleExports),
    );
  }
}

/** Patches a module's exports once, keeping the patches under them for unpatch. */
function patchOnce(patched: Map<object, MethodPatch[]>, moduleExports: Exports, patch: () => MethodPatch[]): Exports {
  if (!patched.has(moduleExports)) patched.set(moduleExports, patch());
  return moduleExports;
}

function unpatch(patched: Map<object, MethodPatch[]> | undefined, moduleExports: object | undefined): void {
  if (moduleExports === undefined) return;
  for (const patch of patched?.get(moduleExports) ?? []) patch.restore();
  patched?.delete(moduleExports);
}
