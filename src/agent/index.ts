// Agent workflow helpers (retries, admission, queue envelopes, detach, tool events).
export {};
