/**
 * MariaDB on 127.0.0.1:3306 (`root`, empty password, database `test`), as
 * .ci/ensure-services.sh starts it: the server-side counts the tests trust.
 */
export const MYSQL_CONFIG = { host: '127.0.0.1', port: 3306, user: 'root', password: '', database: 'test' };

/** A server-side record of which statements ran: one row per tag, written by the statement itself. */
export const MYSQL_LOG = 'otel_deadline_statement_log';

type Admin = import('mysql2/promise').Connection;

export async function createMysqlLog(admin: Admin): Promise<void> {
  await admin.query(`CREATE TABLE IF NOT EXISTS ${MYSQL_LOG} (tag varchar(64) NOT NULL)`);
}

/** How many statements carrying `tag` reached the server and ran. */
export async function ranOnMysql(admin: Admin, tag: string): Promise<number> {
  const [rows] = await admin.query(`SELECT count(*) AS n FROM ${MYSQL_LOG} WHERE tag = ?`, [tag]);
  return Number((rows as { n: number }[])[0].n);
}

/** Connections still running a statement whose text contains `marker`. */
export async function runningOnMysql(admin: Admin, marker: string): Promise<number> {
  const [rows] = await admin.query(
    `SELECT count(*) AS n FROM information_schema.processlist WHERE command = 'Query' AND info LIKE ? AND id <> CONNECTION_ID()`,
    [`%${marker}%`],
  );
  return Number((rows as { n: number }[])[0].n);
}
