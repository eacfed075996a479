// Runs in every test process before its tests.
// eslint-disable-next-line @typescript-eslint/no-var-requires
require('../lib/quiet-warnings.js');
