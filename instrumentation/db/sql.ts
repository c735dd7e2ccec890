/** SQL commands that only read: a cutoff that reaches them unconfirmed leaves nothing half-done. */
const READ_COMMANDS = new Set(['SELECT', 'SHOW', 'VALUES', 'TABLE', 'EXPLAIN', 'DESCRIBE', 'DESC', 'FETCH']);

/**
 * The statement's command in upper case, as the OTel SQL instrumentations
 * name their spans (`SELECT`, `INSERT`, ...): the first word only, never the
 * text, which may hold values.
 */
export function sqlCommand(text: unknown): string | undefined {
  if (typeof text !== 'string') return undefined;
  const match = /^\s*(?:\/\*[\s\S]*?\*\/\s*)?([A-Za-z]{1,20})\b/.exec(text.slice(0, 256));
  return match?.[1]?.toUpperCase();
}

/**
 * Whether a statement may change data. `WITH` counts as a write (a CTE may
 * modify data), and so does text we cannot parse: when unsure, `unknown`.
 */
export function isSqlWrite(command: string | undefined): boolean {
  return command === undefined || !READ_COMMANDS.has(command);
}
