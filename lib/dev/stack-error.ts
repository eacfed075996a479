// The dev stack's one error: its message says what failed and what to do about it.
export class StackError extends Error {
  readonly type = 'StackError';
}
