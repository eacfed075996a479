// The AWS SDK warns on every process start that future versions need Node 22; we pin Node 20
// deliberately, so that one warning is dropped. Every other warning still prints.
const orig = process.emitWarning;
process.emitWarning = function (warning, ...rest) {
  const name = (typeof rest[0] === 'object' && rest[0] && rest[0].type) || rest[0] || (warning && warning.name);
  if (name === 'NodeVersionSupportWarning' || String(warning).includes('will require node >=22')) return;
  return orig.call(process, warning, ...rest);
};
