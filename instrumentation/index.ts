// Transport instrumentation (fetch, undici, node:http/https) lives here.
export {};
