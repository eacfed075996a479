// Phases of a move as a string union and the pure transition table (DESIGN.md §4).
// The point of no return is `switch`: before it every step can be undone by cancel; after it
// the move only goes forward, or back through a second, reverse switch (rollback).

export const PHASES = [
  'plan',
  'copy',
  'catchup',
  'validate',
  'fence',
  'switch',
  'soak',
  'retire',
  'done',
  'cancelling',
  'cancelled',
  'rolling-back',
  'rolled-back',
  'failed',
] as const;
export type Phase = (typeof PHASES)[number];

const NEXT: Record<Phase, readonly Phase[]> = {
  plan: ['copy', 'cancelling', 'failed'],
  copy: ['catchup', 'cancelling'],
  catchup: ['validate', 'cancelling'],
  validate: ['fence', 'catchup', 'cancelling'],
  // A fence that overruns its budget unfences and returns to catch-up.
  fence: ['switch', 'catchup', 'cancelling'],
  switch: ['soak'],
  soak: ['retire', 'rolling-back'],
  // A retire that finds the source written outside shardctl goes back to soak and waits.
  retire: ['done', 'soak'],
  'rolling-back': ['rolled-back', 'soak'],
  // A permanent failure before the switch is undone like a cancel, then ends in `failed`.
  cancelling: ['cancelled', 'failed'],
  done: [],
  cancelled: [],
  'rolled-back': [],
  failed: [],
};

export function canTransition(from: Phase, to: Phase): boolean {
  return NEXT[from].includes(to);
}

export function isTerminal(p: Phase): boolean {
  return NEXT[p].length === 0;
}

/** True once the directory may point at the target: cancel is no longer possible. */
export function pastPointOfNoReturn(p: Phase): boolean {
  return p === 'switch' || p === 'soak' || p === 'retire' || p === 'done' || p === 'rolling-back' || p === 'rolled-back';
}

export function isPhase(s: string): s is Phase {
  return (PHASES as readonly string[]).includes(s);
}

/** Order used by `move wait --phase`: a phase counts as reached once the move is at or past it. */
export function phaseReached(current: Phase, wanted: Phase): boolean {
  if (current === wanted) return true;
  const forward: Phase[] = ['plan', 'copy', 'catchup', 'validate', 'fence', 'switch', 'soak', 'retire', 'done'];
  const ci = forward.indexOf(current);
  const wi = forward.indexOf(wanted);
  if (ci >= 0 && wi >= 0) return ci > wi;
  return false;
}

/** Separation of duties: why `approver` may not approve a move `starter` started, or undefined. */
export function sameApproverRefusal(approver: string, starter: string): string | undefined {
  return approver.trim() === starter.trim()
    ? `separation of duties (approvals.requireDistinctApprover): ${starter} started this move, so another operator must approve it`
    : undefined;
}

/** Why an operator verb is not possible in this phase, or undefined when it is. */
export function refuseVerb(
  verb: 'cancel' | 'approve' | 'rollback' | 'retire-now' | 'extend-soak' | 'pause' | 'resume',
  phase: Phase,
  opts: { paused: boolean; awaitingApproval: boolean },
): string | undefined {
  if (isTerminal(phase)) return `the move is ${phase}; nothing to ${verb}`;
  switch (verb) {
    case 'cancel':
      if (pastPointOfNoReturn(phase)) return `the move is past the switch (phase ${phase}); cancel is no longer possible — use rollback during soak`;
      if (phase === 'cancelling') return 'the move is already cancelling';
      return undefined;
    case 'approve':
      return opts.awaitingApproval ? undefined : `the move is not waiting for cutover approval (phase ${phase})`;
    case 'rollback':
      return phase === 'soak' ? undefined : `rollback is possible only during soak (phase ${phase})`;
    case 'retire-now':
    case 'extend-soak':
      return phase === 'soak' ? undefined : `${verb} is possible only during soak (phase ${phase})`;
    case 'pause':
      if (opts.paused) return 'the move is already paused';
      return phase === 'cancelling' || phase === 'rolling-back' || phase === 'switch' || phase === 'fence' ? `cannot pause during ${phase}` : undefined;
    case 'resume':
      return opts.paused || phase === 'validate' ? undefined : 'the move is not paused';
  }
}
