// ESLint 9 flat config: eslint:recommended + typescript-eslint recommended (syntactic only, no
// type information, so `eslint .` stays a few seconds). Formatting is Prettier's job, not ESLint's.
import { builtinModules } from 'node:module';
import { defineConfig } from 'eslint/config';
import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import globals from 'globals';

export default defineConfig(
  { ignores: ['node_modules/', '.dev/', 'tmp/', 'test-results/', 'test/fixtures/'] },
  js.configs.recommended,
  tseslint.configs.recommended,
  {
    languageOptions: { globals: { ...globals.node } },
    rules: {
      // `catch (e: any)` and untyped SDK / protobuf payloads are used on purpose throughout.
      '@typescript-eslint/no-explicit-any': 'off',
      // Dead code is reported, not fatal; `_`-prefixed names and rest siblings are intentional.
      '@typescript-eslint/no-unused-vars': [
        'warn',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
      // `require('../lib/quiet-warnings.js')` must run before the hoisted imports (it silences a
      // warning the AWS SDK prints at load time), so it stays a require.
      '@typescript-eslint/no-require-imports': ['error', { allow: ['/quiet-warnings\\.js$'] }],
      // Cheap bug catchers the code already satisfies.
      eqeqeq: ['error', 'always'],
      'no-self-compare': 'error',
      'no-template-curly-in-string': 'error',
      'no-unreachable-loop': 'error',
      'no-constructor-return': 'error',
      'no-throw-literal': 'error',
      'no-implied-eval': 'error',
      'no-new-func': 'error',
      'no-sequences': 'error',
      'no-return-assign': 'error',
      'no-new-wrappers': 'error',
      'no-eval': 'error',
      'no-caller': 'error',
      'no-extend-native': 'error',
      'no-useless-concat': 'error',
    },
  },
  {
    // Plain CommonJS entry points (the bin and the warning filter it loads before tsx).
    files: ['**/*.js', '**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    // Deliberate runtime requires: lazily loaded command modules (a broken one must not take the
    // CLI down) and protobufjs resolved from @temporalio/proto's own copy.
    files: ['cli/main.ts', 'scripts/record-history.ts', 'test/unit/replay.test.ts'],
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
  {
    // Workflow code runs in Temporal's deterministic sandbox: no Node builtins, pg or AWS SDK.
    // test/unit/workflow-imports.test.ts checks the same transitively; this is the fast first line.
    // Type-only imports are erased at build time and stay allowed.
    files: ['workflows/**/*.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': [
        'error',
        {
          paths: [...builtinModules, 'pg'].map((name) => ({
            name,
            message: 'workflows/ must stay deterministic: no Node builtins, pg or AWS SDK (put it in an activity).',
            allowTypeImports: true,
          })),
          patterns: [
            {
              group: ['node:*', 'pg/*', 'pg-*', '@aws-sdk/*'],
              message: 'workflows/ must stay deterministic: no Node builtins, pg or AWS SDK (put it in an activity).',
              allowTypeImports: true,
            },
          ],
        },
      ],
      'no-restricted-syntax': [
        'error',
        { selector: "CallExpression[callee.name='require']", message: 'workflows/ use static imports only (checked for determinism).' },
        { selector: 'ImportExpression', message: 'workflows/ use static imports only (checked for determinism).' },
      ],
    },
  },
);
