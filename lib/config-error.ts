// The error a bad configuration raises (exit 2): its message names the file or variable, the
// field and what was expected, and never a secret's value.
export class ConfigError extends Error {
  readonly type = 'ConfigError';
}
