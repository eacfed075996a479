// A seeded generator for the planner's random fleets (its unit and property tests, bench/planner.ts):
// xorshift32, the same numbers for the same seed on every run.
export function xorshift32(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 2 ** 32;
  };
}
