// Runs a tool attached to the Worker's workerd process for as long as a measurement lasts
// (bench/perf.mjs records samples, bench/objects.mjs counts probe hits, bench/kernel.mjs counts
// the kernel's events and system calls).
import { spawn } from 'node:child_process';

/**
 * `start(pid)` spawns `command ...args -p pid` and resolves once it is attached: when its stderr
 * matches `attachedWhen`, or after 300 ms for a tool that does not say; `stop()` ends it
 * (SIGINT, as at a terminal: the tool then writes its data or prints its counts) and resolves
 * with what it printed on stderr (where `perf stat` and `strace -c` print).
 */
export function toolAttached(command, args, { attachedWhen } = {}) {
  let tool;
  let stderr = '';
  return {
    async start(pid) {
      tool = spawn(command, [...args, '-p', String(pid)], { stdio: ['ignore', 'ignore', 'pipe'] });
      tool.stderr.on('data', (d) => { stderr += d; });
      // What is measured starts after this. A tool that exits meanwhile (no such event, no
      // permission) fails here, not in a `stop` that would wait for an exit already past.
      await new Promise((resolve, reject) => {
        const timer = attachedWhen ? null : setTimeout(resolve, 300);
        if (attachedWhen) tool.stderr.on('data', () => { if (attachedWhen.test(stderr)) resolve(); });
        tool.once('error', reject);
        tool.once('exit', (code) => {
          clearTimeout(timer);
          reject(new Error(`${command} ${args[0]} exited (${code}) before the measurement: ${stderr.trim()}`));
        });
      });
    },
    async stop() {
      if (tool.exitCode === null && tool.signalCode === null) {
        const exited = new Promise((resolve) => tool.once('exit', resolve));
        tool.kill('SIGINT');
        await exited;
      }
      return stderr;
    },
  };
}

/** `perf ...args` attached (perf attaches in well under 300 ms and says nothing when it has). */
export const perfAttached = (args) => toolAttached('perf', args);
