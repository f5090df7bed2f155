import { readFileSync, writeFileSync } from 'node:fs';

/**
 * What Linux says of another process (/proc/<pid>): its peak RSS, which can be
 * reset, and its CPU time. The bench reads its dispatcher this way, as an
 * operator's tools would, from outside.
 */

/** The process's peak resident set since it started or since resetPeakRss, in KiB (VmHWM). */
export function peakRssKiB(pid: number): number {
  const match = /^VmHWM:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  if (match === null) throw new Error(`no VmHWM in /proc/${pid}/status`);
  return Number(match[1]);
}

/** Starts the peak RSS over from the current RSS (writing 5 to clear_refs). */
export function resetPeakRss(pid: number): void {
  writeFileSync(`/proc/${pid}/clear_refs`, '5');
}

/** User and system CPU time the process has used, in seconds (/proc/<pid>/stat, in clock ticks of 1/100 s). */
export function cpuSeconds(pid: number): number {
  // The fields after the command name, which is in parentheses and may hold spaces.
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
