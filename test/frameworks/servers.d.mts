export interface Started {
  url: string;
  close(): Promise<void>;
}
export type Failures = Record<string, () => Promise<unknown>>;
export function startExpress(failures: Failures, helper?: unknown): Promise<Started>;
export function startKoa(failures: Failures, helper?: unknown): Promise<Started>;
export function startFastify(failures: Failures): Promise<Started>;
export function startHono(failures: Failures, helper?: unknown): Promise<Started>;
