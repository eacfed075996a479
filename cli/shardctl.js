#!/usr/bin/env node
// Entry point of the `shardctl` bin: runs the TypeScript CLI through tsx (no build step).
require('../lib/quiet-warnings.js');
require('tsx/cjs');
// A reader that stops early (`shardctl move list | head`) is not an error of ours.
for (const s of [process.stdout, process.stderr])
  s.on('error', (e) => {
    if (e && e.code === 'EPIPE') process.exit(process.exitCode || 0);
    throw e;
  });
require('./main.ts')
  .main(process.argv)
  .catch((e) => {
    process.stderr.write(`shardctl: ${e && e.message ? e.message : e}\n`);
    process.exit(1);
  });
