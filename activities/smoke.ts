// Activities for the smoke workflow.
import { z } from 'zod';

const echoInput = z.object({ text: z.string().max(1000) });

export function createSmokeActivities() {
  return {
    async echo(input: z.infer<typeof echoInput>): Promise<string> {
      return echoInput.parse(input).text;
    },
  };
}
export type SmokeActivities = ReturnType<typeof createSmokeActivities>;
