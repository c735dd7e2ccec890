/**
 * Error handlers for frameworks whose default is not enough (koa turns 499 into 500): the error's `status`
 * with `{"code":...}` but no `x-deadline-expired` (the handler did run); other errors go on.
 */
import { isDeadlineError, type DeadlineErrorCode } from './errors';

/** The body every helper sends. */
export interface DeadlineErrorBody {
  code: DeadlineErrorCode;
}

interface ExpressLikeResponse {
  headersSent: boolean;
  status(code: number): { json(body: unknown): unknown };
}

/** express: `app.use(expressDeadlineErrors)`, after the routes (express 4 and 5). */
export function expressDeadlineErrors(err: unknown, _req: unknown, res: ExpressLikeResponse, next: (err?: unknown) => void): void {
  if (!isDeadlineError(err) || res.headersSent) {
    next(err);
    return;
  }
  res.status(err.status).json({ code: err.code } satisfies DeadlineErrorBody);
}

interface KoaLikeContext {
  status: number;
  body: unknown;
}

/** koa: `app.use(koaDeadlineErrors)`, first, before the routes. */
export async function koaDeadlineErrors(ctx: KoaLikeContext, next: () => Promise<unknown>): Promise<void> {
  try {
    await next();
  } catch (err) {
    if (!isDeadlineError(err)) throw err;
    ctx.status = err.status;
    ctx.body = { code: err.code } satisfies DeadlineErrorBody;
  }
}

interface HonoLikeContext {
  json(body: unknown, status: number): Response;
  text(body: string, status: number): Response;
}

/** hono: `app.onError(honoDeadlineErrors)`. Other errors get hono's default answer (HTTPException's response, else 500). */
export function honoDeadlineErrors(err: Error, c: HonoLikeContext): Response {
  if (isDeadlineError(err)) return c.json({ code: err.code } satisfies DeadlineErrorBody, err.status);
  const withResponse = err as Error & { getResponse?: () => Response };
  if (typeof withResponse.getResponse === 'function') return withResponse.getResponse();
  console.error(err);
  return c.text('Internal Server Error', 500);
}
