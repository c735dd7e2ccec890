/**
 * The reply header a deadline-aware server sets when it refused a request
 * because its deadline had passed or too little was left (issue 3's early
 * reject). A retry must never repeat such a call.
 */
export const HEADER_DEADLINE_EXPIRED = 'x-deadline-expired';
