/** A problem with the user's input: printed as one line, never as a stack trace. */
export class LineageInputError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'LineageInputError';
  }
}
