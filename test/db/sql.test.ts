import { describe, expect, it } from 'vitest';
import { holdsSeveralStatements, sqlRole, type SqlDialect, type SqlRole } from '../../instrumentation/db/sql';

describe('sqlRole', () => {
  const rows: [SqlDialect | 'both', string, SqlRole][] = [
    ['both', 'ROLLBACK', 'cleanup'],
    ['both', '  rollback;', 'cleanup'],
    ['both', 'ROLLBACK TO SAVEPOINT sp1', 'cleanup'],
    ['both', '/* app */ ROLLBACK', 'cleanup'],
    ['both', '-- why\nROLLBACK', 'cleanup'],
    // Unicode spaces separate words as ASCII ones do.
    ['both', '\u00a0ROLLBACK\u3000TO sp1', 'cleanup'],
    ['postgres', 'ABORT', 'cleanup'],
    ['postgres', 'DISCARD ALL', 'cleanup'],
    ['postgres', 'RESET ALL', 'cleanup'],
    ['postgres', 'CLOSE my_cursor', 'cleanup'],
    ['postgres', 'DEALLOCATE ALL', 'cleanup'],
    ['postgres', 'UNLISTEN *', 'cleanup'],
    ['mysql', 'UNLOCK TABLES', 'cleanup'],
    ['mysql', '# note\nROLLBACK', 'cleanup'],
    ['both', 'COMMIT', 'commit'],
    ['both', 'commit work', 'commit'],
    ['postgres', 'END', 'commit'],
    ['mysql', 'END', 'work'],
    ['both', 'BEGIN', 'begin'],
    ['both', 'START TRANSACTION', 'begin'],
    ['both', 'START TRANSACTION READ ONLY', 'begin'],
    ['postgres', 'BEGIN ISOLATION LEVEL SERIALIZABLE', 'begin'],
    // Two-phase commit finishes a transaction no session owns.
    ['postgres', "ROLLBACK PREPARED 'tx1'", 'work'],
    ['postgres', "COMMIT PREPARED 'tx1'", 'work'],
    // Several statements: the rest may do anything.
    ['both', 'ROLLBACK; DELETE FROM t', 'work'],
    ['both', 'COMMIT; SELECT 1', 'work'],
    ['both', 'SELECT 1', 'work'],
    ['both', 'UPDATE t SET a = 1', 'work'],
    ['both', '(SELECT 1)', 'work'],
    ['both', '', 'work'],
    ['both', '   ', 'work'],
    ['postgres', 'RESETx', 'work'],
    ['both', 'ROLLBACKS', 'work'],
    ['both', 'Rollback', 'cleanup'],
    ['both', 'rollback_x', 'work'],
    ['both', 'begin1', 'work'],
    ['both', 'START', 'work'],
  ];
  for (const [dialect, text, role] of rows) {
    for (const d of dialect === 'both' ? (['postgres', 'mysql'] as const) : [dialect]) {
      it(`${d}: ${JSON.stringify(text)} is ${role}`, () => {
        expect(sqlRole(text, d)).toBe(role);
      });
    }
  }

  it('is work for what is not text', () => {
    for (const value of [undefined, null, 42, { text: 'ROLLBACK' }]) expect(sqlRole(value, 'postgres')).toBe('work');
  });
});

describe('holdsSeveralStatements', () => {
  const rows: [SqlDialect | 'both', string, boolean][] = [
    ['both', 'SELECT 1', false],
    ['both', 'SELECT 1;', false],
    ['both', 'SELECT 1;  \n ;; ', false],
    ['both', 'SELECT 1; -- trailing comment', false],
    ['both', 'SELECT 1; /* trailing */', false],
    ['both', 'INSERT INTO t VALUES (1); SELECT SLEEP(2)', true],
    ['both', 'SELECT 1;SELECT 2', true],
    ['both', "SELECT ';' AS a", false],
    ['both', "SELECT 'it''s; fine'", false],
    ['both', 'SELECT "a;b" FROM t', false],
    ['both', 'SELECT 1 /* ; */', false],
    ['both', 'SELECT 1 -- ; DROP\n', false],
    ['postgres', 'SELECT $$a; b$$', false],
    ['postgres', 'SELECT $fn$ ; $$ ; $fn$', false],
    ['postgres', "SELECT E'\\'; x'", false],
    ['postgres', "SELECT 'a\\'; SELECT 2", true],
    ['postgres', 'SELECT 1 /* outer /* inner */ ; */', false],
    ['mysql', "SELECT 'a\\'; b'", false],
    ['mysql', 'SELECT `a;b` FROM t', false],
    ['mysql', 'SELECT 1 # ; x\n', false],
    ['mysql', 'SELECT 1--1; SELECT 2', true],
    ['mysql', 'SELECT 1 -- ; SELECT 2', false],
    // Unclosed quotes or comments: when unsure, several.
    ['both', "SELECT 'open", true],
    ['both', 'SELECT 1 /* open', true],
    ['postgres', 'SELECT $$ open', true],
  ];
  for (const [dialect, text, several] of rows) {
    for (const d of dialect === 'both' ? (['postgres', 'mysql'] as const) : [dialect]) {
      it(`${d}: ${JSON.stringify(text)} → ${several}`, () => {
        expect(holdsSeveralStatements(text, d)).toBe(several);
      });
    }
  }

  it('is false for what is not text', () => {
    expect(holdsSeveralStatements(undefined, 'mysql')).toBe(false);
  });
});

describe('long text', () => {
  // A regular expression that backtracks over the text would take minutes on these (quadratic in their length); the
  // test's own time limit is what catches it.
  const MIB = 1 << 20;
  it('one word of almost 1 MiB, then a ; or a space and a word: read once, its role and statements right', () => {
    expect(holdsSeveralStatements(`${'a'.repeat(MIB - 2)};`, 'postgres')).toBe(false);
    expect(sqlRole(`${'a'.repeat(MIB - 2)};`, 'mysql')).toBe('work');
    expect(sqlRole(`ROLLBACK ${'b'.repeat(MIB - 10)}`, 'postgres')).toBe('cleanup');
    expect(sqlRole(`COMMIT ${'PREPARED'.repeat(MIB / 8 - 1)}-`, 'postgres')).toBe('commit');
  });

  it('text longer than 1 MiB counts as several statements without being read', () => {
    expect(holdsSeveralStatements('a'.repeat(MIB + 1), 'postgres')).toBe(true);
  });
});
