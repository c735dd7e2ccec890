/**
 * What the server was told about a statement the cutoff reached while it was
 * in flight (span attribute `deadline.db.cancel`):
 * - `confirmed`: the server cancelled it and said so (PostgreSQL 57014, MariaDB/MySQL 1317);
 * - `unconfirmed`: a cancel was sent, but the statement ended some other way or not in time;
 * - `not_told`: the cancel could not be delivered (no cancel connection), the statement may still run;
 * - `not_possible`: the server has no cancel for it (Redis); blocking commands had their timeout clamped;
 * - `too_late`: the statement finished before the cancel took effect; its result was returned.
 */
export const ATTR_DEADLINE_DB_CANCEL = 'deadline.db.cancel';

export type DbCancel = 'confirmed' | 'unconfirmed' | 'not_told' | 'not_possible' | 'too_late';
