/** SQL commands that only read: a cutoff that reaches them unconfirmed leaves nothing half-done. */
const READ_COMMANDS = new Set(['SELECT', 'SHOW', 'VALUES', 'TABLE', 'EXPLAIN', 'DESCRIBE', 'DESC', 'FETCH']);

/** The statement's first word in upper case, as the OTel SQL instrumentations name spans; never the text. */
export function sqlCommand(text: unknown): string | undefined {
  if (typeof text !== 'string') return undefined;
  const match = /^\s*(?:\/\*[\s\S]*?\*\/\s*)?([A-Za-z]{1,20})\b/.exec(text.slice(0, 256));
  return match?.[1]?.toUpperCase();
}

/** Whether a statement may change data; `WITH` (a CTE may write) and unparsed text count as writes. */
export function isSqlWrite(command: string | undefined): boolean {
  return command === undefined || !READ_COMMANDS.has(command);
}

export type SqlDialect = 'postgres' | 'mysql';

/**
 * What a statement does to its session's transaction: `cleanup` (ROLLBACK, DISCARD, RESET, ...) is never refused or
 * cut; `commit` is refused only after a rollback; `begin`; `work` is anything else, and any text with several statements.
 */
export type SqlRole = 'cleanup' | 'commit' | 'begin' | 'work';

const CLEANUP_COMMANDS: Record<SqlDialect, ReadonlySet<string>> = {
  // CLOSE and DEALLOCATE free a cursor and a prepared statement; UNLISTEN stops notifications.
  postgres: new Set(['ROLLBACK', 'ABORT', 'DISCARD', 'RESET', 'CLOSE', 'DEALLOCATE', 'UNLISTEN']),
  mysql: new Set(['ROLLBACK', 'UNLOCK', 'DEALLOCATE']),
};
/** A first word that may give a role, in either dialect: linear in the text (no backtracking past a run of spaces). */
const ROLE_WORDS = new Set([...CLEANUP_COMMANDS.postgres, ...CLEANUP_COMMANDS.mysql, 'COMMIT', 'END', 'BEGIN', 'START']);
const ROLE_WORD = new RegExp(`^\\s*(?:${[...ROLE_WORDS].join('|')})(?![A-Za-z0-9_])`, 'i');

/** The role of `text` from its first words; `ROLLBACK/COMMIT PREPARED` are `work`. Most text takes two tests, nothing allocated. */
export function sqlRole(text: unknown, dialect: SqlDialect): SqlRole {
  if (typeof text !== 'string') return 'work';
  if (!SCANNED_CHARACTER.test(text) && !ROLE_WORD.test(text)) return 'work';
  const { several, words: [first, second] } = scanSql(text, dialect);
  if (several || first === undefined || second === 'PREPARED') return 'work';
  if (CLEANUP_COMMANDS[dialect].has(first)) return 'cleanup';
  if (first === 'COMMIT' || (first === 'END' && dialect === 'postgres')) return 'commit';
  if (first === 'BEGIN' || (first === 'START' && second === 'TRANSACTION')) return 'begin';
  return 'work';
}

/** Whether `text` holds several statements; text whose quotes or comments never close counts as several. */
export function holdsSeveralStatements(text: unknown, dialect: SqlDialect): boolean {
  return typeof text === 'string' && scanSql(text, dialect).several;
}

/** Longest text looked at: longer text is taken as several statements (when unsure, assume more ran). */
const MAX_SCAN = 1 << 20;

/** A character that starts a quote, a comment, a dollar tag or a second statement: most statements' text has none. */
const SCANNED_CHARACTER = /[;'"`$/#\\-]/;

/** One pass as the server's lexer reads the text: its first two words, stopping at a second statement. */
function scanSql(text: string, dialect: SqlDialect): { words: string[]; several: boolean } {
  if (text.length > MAX_SCAN) return { words: [], several: true };
  const words: string[] = [];
  const mysql = dialect === 'mysql';
  let i = 0;
  let ended = false;
  const n = text.length;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (isSpace(c) || (ended && c === SEMICOLON)) {
      i += 1;
      continue;
    }
    // After a `;`, anything but another `;` starts a second statement.
    if (ended && !isCommentStart(text, i, mysql)) return { words, several: true };
    const next = skipToken(text, i, mysql);
    if (next < 0) return { words, several: true };
    if (c === SEMICOLON) ended = true;
    else if (!ended && words.length < 2 && isWordStart(c)) words.push(text.slice(i, next).toUpperCase());
    else if (!ended && words.length < 2 && !isCommentStart(text, i, mysql)) words.push(''); // a word that is not one: stops the role
    i = next;
  }
  return { words, several: false };
}

// Character codes, not a regular expression per character: every guarded statement's text is read once.
const SEMICOLON = 0x3b;
/** What `/\s/` matches: the lexers' spaces, and Unicode's, which no SQL word or token holds. */
const isSpace = (c: number): boolean => (c < 0x80 ? c === 0x20 || (c >= 0x09 && c <= 0x0d) : /\s/.test(String.fromCharCode(c)));
/** `[A-Za-z_]` */
const isWordStart = (c: number): boolean => (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || c === 0x5f;
/** `[A-Za-z0-9_]` */
const isWordChar = (c: number): boolean => isWordStart(c) || (c >= 0x30 && c <= 0x39);

function isCommentStart(text: string, i: number, mysql: boolean): boolean {
  const c = text[i];
  const d = text[i + 1];
  return isDashComment(text, i, mysql) || (c === '/' && d === '*') || (mysql && c === '#');
}

/** `--` starts a comment; in MySQL only when a space or control character follows (`1--1` is arithmetic). */
function isDashComment(text: string, i: number, mysql: boolean): boolean {
  if (text[i] !== '-' || text[i + 1] !== '-') return false;
  if (!mysql) return true;
  const after = text.charCodeAt(i + 2);
  return Number.isNaN(after) || after <= 0x20;
}

/** The index just after the token that starts at `i`, or -1 when a quote or comment never closes. */
function skipToken(text: string, i: number, mysql: boolean): number {
  const c = text[i]!;
  const d = text[i + 1];
  if (isDashComment(text, i, mysql) || (mysql && c === '#')) {
    const eol = text.indexOf('\n', i);
    return eol < 0 ? text.length : eol + 1;
  }
  if (c === '/' && d === '*') return skipBlockComment(text, i, !mysql);
  if (c === "'") return skipQuoted(text, i, "'", mysql || isEscapeStringPrefix(text, i));
  if (c === '"') return skipQuoted(text, i, '"', mysql);
  if (mysql && c === '`') return skipQuoted(text, i, '`', false);
  if (!mysql && c === '$') {
    const tag = /^\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$/.exec(text.slice(i, i + 64));
    if (tag !== null) {
      const close = text.indexOf(tag[0], i + tag[0].length);
      return close < 0 ? -1 : close + tag[0].length;
    }
  }
  if (isWordChar(text.charCodeAt(i))) {
    let j = i + 1;
    while (j < text.length && (isWordChar(text.charCodeAt(j)) || text[j] === '$')) j += 1;
    return j;
  }
  return i + 1;
}

/** PostgreSQL's E'…' strings take backslash escapes; standard strings do not. */
function isEscapeStringPrefix(text: string, quote: number): boolean {
  const prefix = text[quote - 1];
  return (prefix === 'E' || prefix === 'e') && !isWordChar(text.charCodeAt(quote - 2));
}

function skipQuoted(text: string, i: number, quote: string, backslashEscapes: boolean): number {
  let j = i + 1;
  while (j < text.length) {
    const c = text[j];
    if (backslashEscapes && c === '\\') j += 2;
    else if (c === quote) {
      // A doubled quote is one quote character inside the literal.
      if (text[j + 1] === quote) j += 2;
      else return j + 1;
    } else j += 1;
  }
  return -1;
}

function skipBlockComment(text: string, i: number, nested: boolean): number {
  let depth = 0;
  let j = i;
  while (j < text.length) {
    if (text[j] === '/' && text[j + 1] === '*') {
      depth = nested || depth === 0 ? depth + 1 : depth;
      j += 2;
    } else if (text[j] === '*' && text[j + 1] === '/') {
      depth -= 1;
      j += 2;
      if (depth === 0) return j;
    } else j += 1;
  }
  return -1;
}
