import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);
/** Transpiles TypeScript for the child once per change (test/support/children/register-ts.js). */
const REGISTER_TS = resolve(__dirname, '../support/children/register-ts.js');

// `nestjs-outbox/log-tailing` serves PostgreSQL and MySQL/MariaDB apps alike: importing it must
// load neither database's reader (nor its driver), which each app installs for its own database
// only. Jest stands in for Node's module system, so a plain Node process is asked what was
// required.
describe('importing nestjs-outbox/log-tailing', () => {
  it('loads neither @vlasky/zongji nor pg-logical-replication (nor pg or mysql2) until a source starts', async () => {
    const script = `
      const Module = require('node:module');
      const requested = new Set();
      const load = Module._load;
      Module._load = function (request, ...rest) {
        requested.add(request);
        return load.call(this, request, ...rest);
      };
      const entry = require('./lib/log-tailing');
      console.log(JSON.stringify({
        exports: typeof entry.logTailing,
        readers: [...requested].filter((r) => /zongji|logical-replication|^mysql2|^pg$/.test(r)),
      }));`;
    const { stdout } = await execFileAsync(process.execPath, ['-r', REGISTER_TS, '-e', script], {
      cwd: resolve(__dirname, '../..'),
    });
    expect(JSON.parse(stdout)).toEqual({ exports: 'function', readers: [] });
  });
});
