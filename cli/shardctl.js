#!/usr/bin/env node
// Entry point of the `shardctl` bin: runs the TypeScript CLI through tsx (no build step).
require('../lib/quiet-warnings.js');
require('tsx/cjs');
require('./main.ts')
  .main(process.argv)
  .catch((e) => {
    process.stderr.write(`shardctl: ${e && e.message ? e.message : e}\n`);
    process.exit(1);
  });
