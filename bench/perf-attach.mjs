// Runs a `perf` command attached to the Worker's workerd process for as long as a measurement
// lasts (bench/perf.mjs records samples, bench/objects.mjs counts probe hits).
import { spawn } from 'node:child_process';

/**
 * `start(pid)` spawns `perf ...args -p pid` and resolves once it is attached; `stop()` ends it
 * (SIGINT, as at a terminal: perf then writes its data or prints its counts) and resolves
 * with what it printed on stderr (where `perf stat` prints).
 */
export function perfAttached(args) {
  let perf;
  let stderr = '';
  return {
    async start(pid) {
      perf = spawn('perf', [...args, '-p', String(pid)], { stdio: ['ignore', 'ignore', 'pipe'] });
      perf.stderr.on('data', (d) => { stderr += d; });
      // perf attaches in well under this; what is measured starts after it. A perf that exits
      // meanwhile (no such event, no permission) fails here, not in a `stop` that would wait
      // for an exit already past.
      await new Promise((resolve, reject) => {
        const timer = setTimeout(resolve, 300);
        perf.once('error', reject);
        perf.once('exit', (code) => {
          clearTimeout(timer);
          reject(new Error(`perf ${args[0]} exited (${code}) before the measurement: ${stderr.trim()}`));
        });
      });
    },
    async stop() {
      if (perf.exitCode === null && perf.signalCode === null) {
        const exited = new Promise((resolve) => perf.once('exit', resolve));
        perf.kill('SIGINT');
        await exited;
      }
      return stderr;
    },
  };
}
