// The strings that must never reach a log line or an error message: each DSN whole, and its
// password raw and URL-decoded (other secrets, e.g. the S3 key, pass through as given). Pure.
export function secretStrings(values: readonly string[]): string[] {
  const secrets = new Set<string>();
  for (const v of values) {
    secrets.add(v);
    try {
      const u = new URL(v);
      if (u.password) {
        secrets.add(u.password);
        secrets.add(decodeURIComponent(u.password));
      }
    } catch {
      // not a URL: the literal is enough (a keyword DSN's password= is covered by the callers' patterns)
    }
  }
  return [...secrets].filter((s) => s.length > 0);
}
