// Bounded parallelism for per-object work. The first failure stops new work from starting and
// is rethrown once the in-flight items settle, so no request outlives the call.
export async function forEachLimit<T>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<void>): Promise<void> {
  const n = Math.max(1, Math.min(Math.floor(limit) || 1, items.length || 1));
  let next = 0;
  let failed: { error: unknown } | undefined;
  const worker = async () => {
    while (!failed && next < items.length) {
      const i = next++;
      try {
        await fn(items[i], i);
      } catch (error) {
        failed ??= { error };
      }
    }
  };
  await Promise.all(Array.from({ length: n }, worker));
  if (failed) throw failed.error;
}
